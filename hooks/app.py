"""The HTTP service (FastAPI): lakeFS webhook receiver, export status, history diff, datasets,
the diff page and its sign-in, health, metrics, the Delta Sharing server at /delta-sharing, and the
read-only Iceberg REST catalog at /iceberg.

`create_app` only assembles: the routers (`hooks.routes`, one per capability), what they share
(`hooks.deps`), the one mapping of errors to HTTP answers (`hooks.errors`), and the edge every
request passes first (`hooks.edge`: body size, JSON depth). Request and answer models are in
`hooks.models`; the OpenAPI document at /openapi.json is made from them. Who may read a repository
is lakeFS's decision (`hooks.auth`).
"""

from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI

import exporter
from exporter.config import Config
from exporter.lakefs.lake import Lake
from hooks import errors
from hooks.deps import AUTH_NONE_WARNING, Services
from hooks.edge import Edge
from hooks.iceberg import create_iceberg_app
from hooks.routes import checks, datasets, diff, exports, ops, pages, session, webhook
from hooks.sharing import create_sharing_app

log = logging.getLogger("lakefs_delta.hooks")


def create_app(config: Config, lake: Lake | None = None) -> FastAPI:
    """The service; `lake`: what its routes read through (default: the lakeFS and stores `config` names)."""
    if config.api.auth == "none":
        log.warning(AUTH_NONE_WARNING)
    services = Services.start(config, lake or Lake.connect(config))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        threading.Thread(target=services.warm_up, name="warm-up", daemon=True).start()  # never delays the start
        yield

    app = FastAPI(title="lakefs-delta-exporter", version=exporter.__version__, docs_url=None, redoc_url=None,
                  description="Exports Delta tables in lakeFS for engines outside lakeFS, and diffs them.",
                  lifespan=lifespan)
    app.state.services = services
    sharing, iceberg = create_sharing_app(config, services.lake), create_iceberg_app(config, services)
    app.add_middleware(Edge, apps={"/": app, "/delta-sharing": sharing, "/iceberg": iceberg})  # each its errors' format
    app.add_middleware(NoStore)
    app.mount("/delta-sharing", sharing)  # recipients' bearer tokens, not lakeFS identities
    app.mount("/iceberg", iceberg)  # the API's callers, the spec's errors
    errors.install(app)
    for routes in (webhook, checks, exports, diff, datasets, session, pages, ops):
        app.include_router(routes.router)
    return app


class NoStore:
    """`Cache-Control: no-store` on every answer: status and diffs are per caller and change."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def send_no_store(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"cache-control", b"no-store")]
            await send(message)

        await (self.app(scope, receive, send_no_store) if scope["type"] == "http" else self.app(scope, receive, send))
