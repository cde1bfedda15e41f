"""The Iceberg REST catalog, mounted at `/iceberg` (clients are given `uri: <service>/iceberg`): a
thin adapter over `exporter.catalog.iceberg`. Callers are the API's (lakeFS identities,
service tokens, one grant per request: `hooks.grant`); errors have the spec's body (`hooks.iceberg.errors`)."""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import FastAPI

from exporter.config import Config
from exporter.catalog.iceberg import IcebergCatalog
from hooks.deps import Services
from hooks.iceberg import errors, namespaces, tables, writes

API_VERSION = "/v1"


def create_iceberg_app(config: Config, services: Services) -> FastAPI:
    app = FastAPI(title="lakefs-delta-exporter Iceberg REST catalog", docs_url=None, redoc_url=None,
                  openapi_url=None)  # the document is the Iceberg REST spec's
    app.state.services = services  # the API's: the same callers, decided the same way
    app.state.catalog = IcebergCatalog(services.lake)
    errors.install(app)
    for routes in (namespaces, tables, writes):
        app.include_router(routes.router, prefix=API_VERSION)
    app.add_middleware(SegmentPaths)
    return app


class SegmentPaths:
    """Routes match each raw path segment decoded alone: a namespace part or table name may hold `/`
    (a tag `release/v1.2`, sent as `%2F`), which the decoded path would split. In the path routes
    see, a segment's `%` and `/` stay encoded; `deps.segment` decodes a path parameter."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            scope = {**scope, "path": "/".join(unquote(part).replace("%", "%25").replace("/", "%2F")
                                               for part in raw.decode("latin-1").split("/"))}
        await self.app(scope, receive, send)
