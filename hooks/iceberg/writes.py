"""Every write the spec defines, refused as it allows (406 UnsupportedOperationException): tables
here change by lakeFS commits, never through the catalog. Metrics reports are taken and dropped."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from hooks.iceberg.errors import ReadOnly

router = APIRouter()
WRITES = [  # (method, path, what a client asked for)
    ("POST", "/namespaces", "create a namespace"),
    ("DELETE", "/namespaces/{namespace}", "drop a namespace"),
    ("POST", "/namespaces/{namespace}/properties", "update a namespace's properties"),
    ("POST", "/namespaces/{namespace}/tables", "create a table"),
    ("POST", "/namespaces/{namespace}/register", "register a table"),
    ("POST", "/namespaces/{namespace}/tables/{table}", "commit to a table"),
    ("DELETE", "/namespaces/{namespace}/tables/{table}", "drop a table"),
    ("POST", "/tables/rename", "rename a table"),
    ("POST", "/transactions/commit", "commit a transaction"),
]


def _refusal(what: str):
    async def refuse():
        raise ReadOnly(f"this catalog is read-only: it does not {what} (its tables are lakeFS exports, "
                       "changed by lakeFS commits)")
    return refuse


for method, path, what in WRITES:
    router.add_api_route(path, _refusal(what), methods=[method])


@router.post("/namespaces/{namespace}/tables/{table}/metrics")
async def report_metrics():
    """Readers (Iceberg's Java client) report scan metrics here; nothing keeps them."""
    return Response(status_code=204)
