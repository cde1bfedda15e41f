"""Delta Sharing: the shares, schemas and tables a recipient may list, paged by name."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Query
from starlette.requests import Request

from exporter.errors import InvalidParameter
from exporter.sharing.catalog import TableName
from hooks.sharing.deps import catalog_of, in_thread

MAX_RESULTS = 500
router = APIRouter()


@router.get("/shares")
async def list_shares(request: Request, maxResults: int = Query(MAX_RESULTS, ge=0), pageToken: str | None = None):
    catalog = await catalog_of(request)
    return page([{"name": share.name} for share in catalog.shares()], maxResults, pageToken)


@router.get("/shares/{share}")
async def get_share(request: Request, share: str):
    catalog = await catalog_of(request)
    return {"share": {"name": catalog.share(share).name}}


@router.get("/shares/{share}/schemas")
async def list_schemas(request: Request, share: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                       pageToken: str | None = None):
    catalog = await catalog_of(request)
    offered = catalog.share(share)
    schemas = await in_thread(request, catalog.schemas, offered)
    return page([{"name": schema.name, "share": offered.name} for schema in schemas], maxResults, pageToken)


@router.get("/shares/{share}/schemas/{schema}/tables")
async def list_tables(request: Request, share: str, schema: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                      pageToken: str | None = None):
    catalog = await catalog_of(request)
    offered = catalog.share(share)

    def tables() -> list[dict]:
        found = catalog.schema(offered, schema)
        return [_table_item(name, found.name, offered.name) for name in catalog.tables(offered, found)]
    return page(await in_thread(request, tables), maxResults, pageToken)


@router.get("/shares/{share}/all-tables")
async def list_all_tables(request: Request, share: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                          pageToken: str | None = None):
    catalog = await catalog_of(request)
    offered = catalog.share(share)

    def tables() -> list[dict]:
        return [_table_item(name, schema.name, offered.name)
                for schema in catalog.schemas(offered) for name in catalog.tables(offered, schema)]
    return page(await in_thread(request, tables), maxResults, pageToken)


def _table_item(name: TableName, schema: str, share: str) -> dict:
    """The protocol's table object; a table offered under another name than its own carries that
    one as `lakefsName` (clients ignore fields they do not know)."""
    item = {"name": name.shared, "schema": schema, "share": share}
    if name.original != name.shared:
        item["lakefsName"] = name.original
    return item


def page(items: list[dict], max_results: int, page_token: str | None) -> dict:
    """A page of `items` (sorted by name): after the name the token holds, at most `max_results`."""
    after = ""
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except ValueError:
            raise InvalidParameter("pageToken is not one this server issued") from None
    remaining = [item for item in items if _key(item) > after]
    chosen = remaining[:max_results]
    answer: dict[str, Any] = {"items": chosen}
    if len(remaining) > len(chosen):
        last = _key(chosen[-1]) if chosen else after
        answer["nextPageToken"] = base64.urlsafe_b64encode(last.encode()).decode()
    return answer


def _key(item: dict) -> str:
    return f"{item.get('schema', '')}\0{item['name']}"
