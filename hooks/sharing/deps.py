"""What the Delta Sharing routes share: the configuration, the recipients and the lakeFS client
(on `app.state`), and the recipient's catalog from its bearer token."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.config import Config
from exporter.lakefs.client import LakeFS
from exporter.sharing.catalog import Catalog
from exporter.state.recipients import Recipient, Recipients, Unauthenticated
from exporter.storage.presign import Presigner


@dataclass(frozen=True)
class SharingServices:
    config: Config
    recipients: Recipients
    lakefs: LakeFS

    @classmethod
    def start(cls, config: Config) -> "SharingServices":
        return cls(config, Recipients(config.redis), LakeFS(config.lakefs))

    def presigner(self) -> Presigner:
        return Presigner(self.config, self.config.sharing.url_lifetime_seconds)


def services(request: Request) -> SharingServices:
    return request.app.state.sharing


async def catalog_of(request: Request) -> Catalog:
    """What the recipient holding the request's bearer token may read; Unauthenticated without one.
    Called first in a route's body, so that invalid parameters are refused before credentials."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing bearer token (header Authorization: Bearer <token>)")
    shared = services(request)
    recipient: Recipient = await run_in_threadpool(shared.recipients.authenticate, token.strip())
    return Catalog(shared.config, shared.lakefs, recipient.shares)
