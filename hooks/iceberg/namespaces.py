"""The catalog's configuration and namespaces: [repository] (holding refs) and [repository, ref]."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from hooks.grant import may_open, require_caller
from hooks.iceberg.deps import catalog, levels, page, readable_namespace, segment

router = APIRouter()
# what this catalog serves, in the spec's words (clients check before they call)
ENDPOINTS = ["GET /v1/{prefix}/namespaces", "GET /v1/{prefix}/namespaces/{namespace}",
             "HEAD /v1/{prefix}/namespaces/{namespace}", "GET /v1/{prefix}/namespaces/{namespace}/tables",
             "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
             "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
             "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
             "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"]


@router.get("/config")
async def config(request: Request, warehouse: str | None = None):
    """One catalog per service: a `warehouse` the client names changes nothing. Answered to a caller
    lakeFS knows (or a service token), like every other route."""
    await require_caller(request)
    return {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}


@router.get("/namespaces")
async def list_namespaces(request: Request, parent: str | None = Query(None), pageToken: str | None = None,
                          pageSize: int | None = Query(None, ge=1)):
    """Without `parent`: the repositories the caller may read. Under [repository]: its branches and
    tags with exports. Under [repository, ref]: none. Paged by name (`deps.page`)."""
    await require_caller(request)  # the credentials are known before the listing fans out
    if not parent:
        repositories = await run_in_threadpool(catalog(request).repositories)
        readable = await asyncio.gather(*(may_open(request, repository) for repository in repositories))
        namespaces, more = page([r for r, may in zip(repositories, readable) if may], str, pageToken, pageSize)
        return {"namespaces": [[repository] for repository in namespaces], **more}
    parts = levels(parent)
    if (await readable_namespace(request, parts))[1] is not None:
        return {"namespaces": []}
    refs, more = page(await run_in_threadpool(catalog(request).refs, parts[0]), str, pageToken, pageSize)
    return {"namespaces": [[parts[0], ref] for ref in refs], **more}


@router.get("/namespaces/{namespace}")
async def load_namespace(request: Request, namespace: str):
    parts = levels(segment(namespace))
    _, found = await readable_namespace(request, parts)
    return {"namespace": parts, "properties": {} if found is None else {"commit-id": found.commit_id}}


@router.head("/namespaces/{namespace}")
async def namespace_exists(request: Request, namespace: str):
    await readable_namespace(request, levels(segment(namespace)))
    return Response(status_code=204)
