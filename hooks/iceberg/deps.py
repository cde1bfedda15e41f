"""What the catalog's routes share: the catalog (on `app.state`), namespaces and names from the path,
and a namespace or table once the request's grant (`hooks.grant`, the API's) allows it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.errors import NoSuchIcebergTable, NoSuchNamespace
from exporter.catalog.iceberg import CatalogTable, IcebergCatalog, RefNamespace
from hooks.grant import Grant, grant_for

SEPARATOR = "\x1f"  # the spec's default namespace separator (`%1F` in a URL)
Listed = TypeVar("Listed")


def page(items: Sequence[Listed], name: Callable[[Listed], str], token: str | None,
         size: int | None) -> tuple[list[Listed], dict[str, str]]:
    """The spec's paging of a listing: the items after the `pageToken` (the name the page before
    ended at), at most `pageSize` (all without one), by name; and `{"next-page-token": ...}` when
    more follow. Callers page what the grant allows (`Grant.readable` first): a token names only
    what the caller may read."""
    ordered = sorted(items, key=name)
    if token:
        ordered = [item for item in ordered if name(item) > token]
    if size is None or len(ordered) <= size:
        return ordered, {}
    return ordered[:size], {"next-page-token": name(ordered[size - 1])}


def catalog(request: Request) -> IcebergCatalog:
    return request.app.state.catalog


def segment(parameter: str) -> str:
    """A path parameter as the client meant it (`app.SegmentPaths` left its `%` and `/` encoded)."""
    return unquote(parameter)


def levels(namespace: str) -> list[str]:
    """A namespace's levels (decoded, as `parent` or `segment` gives it): one `[repository]`, or two
    `[repository, ref]`."""
    parts = namespace.split(SEPARATOR)
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise NoSuchNamespace(f"no namespace {'.'.join(parts)!r}: namespaces are [repository] and [repository, ref]")
    return parts


async def readable_namespace(request: Request, parts: list[str]) -> tuple[Grant, RefNamespace | None]:
    """The request's grant in the namespace's repository and the namespace `parts` (from `levels`):
    the ref's, resolved to its commit once, or None for a repository's own (it holds refs, no tables)."""
    grant = await grant_for(request, parts[0])
    if len(parts) == 1:
        return grant, None
    found = await run_in_threadpool(catalog(request).namespace, *parts)
    grant.commits[found.ref] = found.commit_id
    return grant, found


async def readable_table(request: Request, parts: list[str], table: str) -> CatalogTable:
    """The table as the namespace's current commit holds it (`IcebergCatalog.current`), once the caller
    may read it."""
    grant, found = await readable_namespace(request, parts)
    if found is None:
        raise NoSuchIcebergTable(f"no table {table!r} in {parts[0]!r}: a repository's namespace holds refs, "
                                 "not tables (ask [repository, ref])")
    return await _readable(grant, lambda: catalog(request).current(found, table), found.ref, found.commit_id, table)


async def readable_export(grant: Grant, tables: IcebergCatalog, ref: str, commit_id: str, table: str) -> CatalogTable:
    """The table of the export at `commit_id` through `ref`, once the caller may read it."""
    return await _readable(grant, lambda: tables.table(grant.repository, ref, commit_id, table), ref, commit_id, table)


async def _readable(grant: Grant, lookup: Callable[[], CatalogTable], ref: str, commit_id: str,
                    table: str) -> CatalogTable:
    """The table `lookup` finds, once the caller may read every path its versions came from at the
    commit it was exported at. Why a table has no Iceberg metadata is told only to whom may read it."""
    try:
        found = await run_in_threadpool(lookup)
    except NoSuchIcebergTable as missing:
        if missing.table_paths and not await grant.may_read(commit_id, missing.table_paths):
            raise NoSuchIcebergTable(f"no table {table!r} at {ref!r} that this identity may read") from None
        raise
    await grant.require(found.commit_id, found.table_paths, f"table {table!r} at {ref!r}")
    return found
