"""The Delta Sharing server (delta-io/delta-sharing PROTOCOL.md), mounted at `/delta-sharing`: a
thin adapter over `exporter.sharing`. Recipients authenticate with their bearer token; errors
carry the protocol's body, `{"errorCode": ..., "message": ...}` (`hooks.sharing.errors`)."""

from __future__ import annotations

from fastapi import FastAPI

from exporter.config import Config
from exporter.lakefs.lake import Lake
from hooks.sharing import errors, shares, tables
from hooks.sharing.deps import SharingServices


def create_sharing_app(config: Config, lake: Lake) -> FastAPI:
    app = FastAPI(title="lakefs-delta-exporter Delta Sharing", docs_url=None, redoc_url=None,
                  description="Delta Sharing protocol server over lakeFS branch tables and tag exports.")
    app.state.sharing = SharingServices.start(config, lake)
    errors.install(app)
    app.include_router(shares.router)
    app.include_router(tables.router)
    return app
