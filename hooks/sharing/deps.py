"""What the Delta Sharing routes share: the configuration, the recipients and the lakeFS client
(on `app.state`), and the recipient's catalog from its bearer token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from starlette.requests import Request

from exporter.config import Config
from exporter.lakefs.lake import Lake
from exporter.sharing.catalog import Catalog
from exporter.state.recipients import Recipient, Recipients, Unauthenticated
from exporter.storage.presign import Presigner


# Threads that build sharing answers at once. Each holds the GIL for most of its work (Arrow, JSON,
# signatures): with 40 of them (anyio's default) the event loop waited its turn behind every one, and
# a webhook posted while 60 answers of a 1M-file table streamed took up to 3.6 s.
ANSWER_THREADS = 4
_T = TypeVar("_T")


@dataclass(frozen=True)
class SharingServices:
    config: Config
    recipients: Recipients
    lake: Lake
    threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(ANSWER_THREADS))

    @classmethod
    def start(cls, config: Config, lake: Lake) -> "SharingServices":
        return cls(config, Recipients(config.redis), lake)

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
    recipient: Recipient = await in_thread(request, shared.recipients.authenticate, token.strip())
    return Catalog(shared.lake, recipient.shares)


async def in_thread(request: Request, function: Callable[..., _T], *args: Any) -> _T:
    """`function(*args)` on the sharing answers' own threads."""
    return await anyio.to_thread.run_sync(function, *args, limiter=services(request).threads)


async def chunks(request: Request, iterator: Iterator[bytes]) -> AsyncIterator[bytes]:
    """An answer's chunks, each made on the sharing answers' own threads."""
    end = object()
    while (chunk := await in_thread(request, next, iterator, end)) is not end:
        yield chunk
