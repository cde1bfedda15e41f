"""Reading exports: a commit's export status, and a branch table's commit <-> version mapping."""

from __future__ import annotations

import logging

import redis
from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.errors import ExporterError
from exporter.export.branch_table import branch_table_versions
from exporter.export.commit import exports_in_store
from exporter.state.status import COMMIT_RECORD
from hooks.deps import ServicesDep, require_reader
from hooks.errors import Refusal, answer_of, problems
from hooks.models import BranchTableVersions, ExportStatus

log = logging.getLogger("lakefs_delta.hooks")
router = APIRouter()


@router.get("/exports/{repository}/{commit}", response_model=ExportStatus, summary="Export status of one commit",
            responses=problems(400, 401, 403, 404, 503))
async def export_status(request: Request, services: ServicesDep, repository: str, commit: str,
                        ref: str | None = Query(None, description="only this ref's exports")):
    """Per ref and table: queued, running, retrying, done (with its location) or failed (with
    the reason). Without a Redis record, answered from the manifests in the object store."""
    await require_reader(request, repository)
    try:
        records = await run_in_threadpool(services.status.tables, repository, commit, ref)
    except Exception as exc:
        records = {}
        log.warning("status store unavailable, answering from the manifests: %s", type(exc).__name__)
    if not records:  # Redis lost or never had it: the manifests in the store are the truth
        try:
            records = await run_in_threadpool(exports_in_store, services.config, repository, commit, ref)
        except (ExporterError, redis.RedisError) as exc:
            status, message, _ = answer_of(exc)
            if status in (422, 503):
                raise Refusal(503, f"status store and object store unavailable: {message}") from None
            raise
    if not records:
        raise Refusal(404, f"no export known for commit {commit} in repository {repository}")
    refs = {name: {"commit": tables.pop(COMMIT_RECORD, None), "tables": tables} for name, tables in records.items()}
    return {"repository": repository, "commit_id": commit, "refs": refs}


@router.get("/repositories/{repository}/branches/{branch}/tables/{table}/versions",
            response_model=BranchTableVersions, summary="A branch table's lakeFS commit <-> Delta version mapping",
            responses=problems(400, 401, 403, 404, 422, 503))
async def branch_table(request: Request, services: ServicesDep, repository: str, branch: str, table: str,
                       commit: str | None = Query(None, description="only this lakeFS commit's entry")):
    """The branch table of `table` on `branch`: its location (which never changes), head, offset
    and, for each lakeFS commit it followed, the version that reads as the table at that commit
    (`versionAsOf` on the location)."""
    await require_reader(request, repository)
    versions = await run_in_threadpool(branch_table_versions, services.config, None, repository, branch, table)
    await require_reader(request, repository, [(branch, versions["table_path"])])
    if commit is not None:
        versions["commits"] = [entry for entry in versions["commits"] if entry["commit_id"] == commit]
        if not versions["commits"]:
            raise Refusal(404, f"the branch table of {table!r} on {branch!r} has no version for commit {commit}")
    return versions
