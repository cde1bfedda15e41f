"""Diffs between two refs: one Delta table's history, its rows, and every table that differs.
Computed by the workers and cached (`hooks.deps.from_workers`): 202 while computing."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.diff.rows.compute import key_part
from exporter.diff.rows.file import rows_page
from exporter.errors import NotFound
from hooks.deps import COMPUTING, ServicesDep, from_workers, still_computing
from hooks.errors import Refusal, problems
from hooks.grant import grant_for
from hooks.models import RefsOverview, RowDiff, TableDiff
from hooks.paging import MAX_PER_PAGE, paginate, row_pagination, row_start

router = APIRouter()
DIFF = "/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}"


@router.get(DIFF, response_model=TableDiff, summary="How a Delta table changed from left_ref to right_ref",
            responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def table_diff(request: Request, services: ServicesDep, repository: str, left_ref: str, right_ref: str,
                     table_path: str = Query(min_length=1, description="the table's path from the repository root"),
                     type: Literal["delta"] = Query("delta"),
                     after: str | None = Query(None, description="a result id: the page starts after it"),
                     amount: int = Query(100, ge=1, le=MAX_PER_PAGE)):
    """lakeFS's former OTF diff, extended: operations on the right not on the left (newest
    first, paged), schema changes, row count, files, properties and protocol changes. Answered
    from the cache; a diff not there yet is computed by a worker, waited for up to
    `api.diff_wait_seconds`, else 202."""
    table_path = _table_path(table_path)
    left_commit, right_commit = await _readable_table(request, repository, left_ref, right_ref, table_path)
    started = time.monotonic()
    cached, diff = await from_workers(services, services.diffs, "lakefs_delta.compute_diff",
                                      (repository, left_commit, right_commit, table_path))
    if diff is None:
        return still_computing()
    if diff["versions"]["left"] is None and diff["versions"]["right"] is None:
        raise Refusal(404, f"no Delta table at {table_path!r} on {left_ref} or {right_ref}")
    try:
        page, pagination = paginate(diff["results"], after, amount)
    except ValueError as exc:
        raise Refusal(400, str(exc)) from None
    services.metrics.diff_seconds.labels(str(cached).lower()).observe(time.monotonic() - started)
    return {**diff, "results": page, "pagination": pagination, "cached": cached}


@router.get(DIFF + "/rows", response_model=RowDiff,
            summary="Which rows of a Delta table differ from left_ref to right_ref", responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def row_diff(request: Request, services: ServicesDep, repository: str, left_ref: str, right_ref: str,
                   table_path: str = Query(min_length=1, description="the table's path from the repository root"),
                   key: str = Query("", description="comma-separated key columns: rows removed and added with "
                                                    "the same key are one update"),
                   after: str | None = Query(None, description="a row id: the page starts after it"),
                   amount: int = Query(100, ge=1, le=MAX_PER_PAGE)):
    """Read only from the files that differ: rows of files on one side, the rows whose
    deletion-vector bits differ, equal rows cancelling out (a rewrite shows nothing). Counts
    per change and partition, the files, and the rows, paged. Computed by a worker and cached,
    like the history diff (202 while computing)."""
    table_path = _table_path(table_path)
    left_commit, right_commit = await _readable_table(request, repository, left_ref, right_ref, table_path)
    columns = tuple(c.strip() for c in key.split(",") if c.strip())
    parts = (repository, left_commit, right_commit, table_path, key_part(columns))
    try:
        start = row_start(after)
    except ValueError as exc:
        raise Refusal(400, str(exc)) from None
    for _ in range(2):  # a cached answer whose rows file is gone is computed again, once
        cached, diff = await from_workers(services, services.row_diffs, "lakefs_delta.compute_row_diff", parts)
        if diff is None:
            return still_computing(await run_in_threadpool(services.row_diffs.progress, *parts))
        page, total = [], 0
        if not diff["rows_location"]:
            break
        store = await run_in_threadpool(services.lake.store, repository)
        try:  # the rows are a Parquet file: read the row groups of this page only
            page, total = await run_in_threadpool(rows_page, store, diff["rows_location"], start, amount)
            break
        except NotFound:
            await run_in_threadpool(services.row_diffs.forget, *parts)
    else:
        return still_computing()
    try:
        pagination = row_pagination(page, start, amount, total)
    except ValueError as exc:
        raise Refusal(400, str(exc)) from None
    return {**diff, "rows": page, "pagination": pagination, "cached": cached}


@router.get(DIFF + "/tables", response_model=RefsOverview, summary="Every table that differs between two refs",
            responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def refs_overview(request: Request, services: ServicesDep, repository: str, left_ref: str, right_ref: str):
    """Descriptors and detected Delta tables on either side whose objects changed, each with
    its diff type, row delta, files and a schema-change flag (from its history diff). Only the
    tables the caller may read at both commits are listed."""
    grant = await grant_for(request, repository, [left_ref, right_ref])
    left_commit, right_commit = grant.commit(left_ref), grant.commit(right_ref)
    cached, overview = await from_workers(services, services.overviews, "lakefs_delta.compare_refs",
                                          (repository, left_commit, right_commit))
    if overview is None:
        return still_computing()
    tables = await grant.readable(overview["tables"], lambda _: (left_commit, right_commit), lambda t: [t["path"]])
    return {**overview, "tables": tables, "repository": repository, "left_ref": left_ref, "right_ref": right_ref,
            "cached": cached}


def _table_path(table_path: str) -> str:
    table_path = table_path.strip("/")
    if not table_path:
        raise Refusal(400, "table_path: names no table")
    return table_path


async def _readable_table(request: Request, repository: str, left_ref: str, right_ref: str,
                          table_path: str) -> tuple[str, str]:
    """The commits the refs resolve to, once the caller may read the table at both."""
    grant = await grant_for(request, repository, [left_ref, right_ref])
    for ref in dict.fromkeys((left_ref, right_ref)):
        await grant.require(grant.commit(ref), [table_path], f"table {table_path!r} at {ref!r}")
    return grant.commit(left_ref), grant.commit(right_ref)
