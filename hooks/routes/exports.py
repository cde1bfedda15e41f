"""Reading exports: a commit's export status, and a branch table's commit <-> version mapping."""

from __future__ import annotations

import asyncio
import logging

import redis
from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.errors import ExporterError
from exporter.branch_tables.table import branch_table_versions
from exporter.export.commit import exports_in_store
from exporter.lakefs.descriptors import DESCRIPTORS_PREFIX, discover_tables
from exporter.state.status import COMMIT_RECORD
from hooks.deps import ServicesDep
from hooks.edge import CommitId
from hooks.errors import Refusal, answer_of, problems
from hooks.grant import Grant, grant_for
from hooks.models import BranchTableVersions, ExportStatus

log = logging.getLogger("lakefs_delta.hooks")
router = APIRouter()


@router.get("/exports/{repository}/{commit}", response_model=ExportStatus, summary="Export status of one commit",
            responses=problems(400, 401, 403, 404, 503))
async def export_status(request: Request, services: ServicesDep, repository: str, commit: CommitId,
                        ref: str | None = Query(None, description="only this ref's exports")):
    """Per ref and table: queued, running, retrying, done (with its location) or failed (with
    the reason). Without a Redis record, answered from the manifests in the object store. Only the
    tables the caller may read at the commit are named."""
    grant = await grant_for(request, repository, [commit])
    commit = grant.commit(commit)
    try:
        records = await run_in_threadpool(services.status.tables, repository, commit, ref)
    except Exception as exc:
        records = {}
        log.warning("status store unavailable, answering from the manifests: %s", type(exc).__name__)
    if not records:  # Redis lost or never had it: the manifests in the store are the truth
        try:
            records = await run_in_threadpool(exports_in_store, services.lake, repository, commit, ref)
        except (ExporterError, redis.RedisError) as exc:
            status, message, _ = answer_of(exc)
            if status in (422, 503):
                raise Refusal(503, f"status store and object store unavailable: {message}") from None
            raise
    records = await _readable_records(request, services, grant, commit, records)
    if not records:
        raise Refusal(404, f"no export known for commit {commit} in repository {repository}")
    refs = {name: {"commit": tables.pop(COMMIT_RECORD, None), "tables": tables} for name, tables in records.items()}
    return {"repository": repository, "commit_id": commit, "refs": refs}


async def _readable_records(request: Request, services, grant: Grant, commit_id: str,
                            records: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """The records of the tables the caller may read, and each ref's commit record naming only
    those; a table whose path no record tells is found from the commit's descriptors, and a refused
    descriptor's record is shown to whom may read the descriptor."""
    if grant.whole:
        return records
    paths: dict[str, str] = {}
    if any(not record.get("table_path") for tables in records.values() for name, record in tables.items()
           if name != COMMIT_RECORD):
        found = await run_in_threadpool(discover_tables, services.lakefs(), grant.repository, commit_id)
        paths = {table.name: table.path for table in found.tables}

    async def may_read(name: str, record: dict) -> bool:
        if name.startswith(DESCRIPTORS_PREFIX):  # a descriptor refused before it named a table
            return await grant.may_read_object(commit_id, name)
        path = record.get("table_path") or paths.get(name)
        return path is not None and await grant.may_read(commit_id, [path])

    readable: dict[str, dict[str, dict]] = {}
    for ref, tables in records.items():
        names = [name for name in tables if name != COMMIT_RECORD]
        allowed = await asyncio.gather(*(may_read(name, tables[name]) for name in names))
        kept = {name: tables[name] for name, may in zip(names, allowed) if may}
        if COMMIT_RECORD in tables:
            commit_record = dict(tables[COMMIT_RECORD])
            if isinstance(commit_record.get("tables"), list):
                commit_record["tables"] = [name for name in commit_record["tables"] if name in kept]
            kept[COMMIT_RECORD] = commit_record
        if kept:
            readable[ref] = kept
    return readable


@router.get("/repositories/{repository}/branches/{branch}/tables/{table}/versions",
            response_model=BranchTableVersions, summary="A branch table's lakeFS commit <-> Delta version mapping",
            responses=problems(400, 401, 403, 404, 422, 503))
async def branch_table(request: Request, services: ServicesDep, repository: str, branch: str, table: str,
                       commit: str | None = Query(None, description="only this lakeFS commit's entry")):
    """The branch table of `table` on `branch`: its location (which never changes), head, offset
    and, for each lakeFS commit it followed, the version that reads as the table at that commit
    (`versionAsOf` on the location). Answered to a caller who may read every path its versions
    came from (a descriptor re-pointed to another path: both)."""
    grant = await grant_for(request, repository, [branch])
    versions = await run_in_threadpool(branch_table_versions, services.lake, repository, branch, table)
    await grant.require(grant.commit(branch), versions.get("table_paths") or [versions["table_path"]],
                        f"the branch table of {table!r} on {branch!r}")
    if commit is not None:
        versions["commits"] = [entry for entry in versions["commits"] if entry["commit_id"] == commit]
        if not versions["commits"]:
            raise Refusal(404, f"the branch table of {table!r} on {branch!r} has no version for commit {commit}")
    return versions
