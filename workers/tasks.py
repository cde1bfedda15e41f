"""Celery tasks: they take ids, not objects, and call plain functions in `exporter`."""

from __future__ import annotations

import logging
import random
import time

from celery.exceptions import MaxRetriesExceededError

from exporter.diff import DiffCache, cached_diff
from exporter.errors import ExporterError
from exporter.export import export_table as export_one_table
from exporter.export import ExportOutcome, abandon_export, find_table, missing_exports
from exporter.lakefs import LakeFS
from exporter.status import StatusStore
from exporter.tables import DESCRIPTORS_PREFIX, TableDescriptor, changed_tables, discover_tables
from workers.app import app, config

log = logging.getLogger("lakefs_delta.worker")
status = StatusStore(config.redis_url)
diffs = DiffCache(config.redis_url, config.diff_cache_ttl_seconds)


def backoff(retries: int) -> float:
    """Exponential backoff with full jitter, capped."""
    ceiling = min(config.retry.backoff_max_seconds, config.retry.backoff_seconds * 2 ** retries)
    return random.uniform(config.retry.backoff_seconds / 2, max(ceiling, config.retry.backoff_seconds))


@app.task(name="lakefs_delta.ping")
def ping(word: str) -> str:
    """Proves a worker is consuming from the broker."""
    return f"pong: {word}"


@app.task(bind=True, name="lakefs_delta.export_commit")
def export_commit(self, repository: str, ref: str, commit_id: str) -> list[str]:
    """Find the tables a commit changed and fan out one `export_table` per table."""
    lakefs = LakeFS(config.lakefs)
    try:
        discovery = discover_tables(lakefs, repository, commit_id)
        tables = changed_tables(lakefs, repository, commit_id, discovery.tables)
    except ExporterError as exc:
        if exc.permanent or self.request.retries >= config.retry.max_retries:
            log.error("commit %s/%s: cannot list tables: %s", repository, commit_id, exc)
            status.set_table(repository, commit_id, "_commit", "failed", reason=str(exc))
            status.count("lakefs_delta_tasks_total", {"task": "export_commit", "outcome": "failed"})
            return []
        status.count("lakefs_delta_tasks_total", {"task": "export_commit", "outcome": "retried"})
        raise self.retry(countdown=backoff(self.request.retries), max_retries=config.retry.max_retries)
    for error in discovery.errors:
        descriptor = str(error).split(":", 1)[0]
        status.set_table(repository, commit_id, descriptor, "failed", reason=str(error))
        log.warning("commit %s/%s: %s", repository, commit_id, error)
    for table in tables:
        status.set_table(repository, commit_id, table.name, "queued", ref=ref, table_path=table.path)
        export_table.delay(repository, ref, commit_id, table.name, table.path)
    log.info("commit %s/%s (%s): %d table(s) queued: %s", repository, commit_id, ref, len(tables),
             ", ".join(t.name for t in tables) or "-")
    status.count("lakefs_delta_tasks_total", {"task": "export_commit", "outcome": "succeeded"})
    return [t.name for t in tables]


@app.task(bind=True, name="lakefs_delta.export_table")
def export_table(self, repository: str, ref: str, commit_id: str, table_name: str, table_path: str = "") -> dict:
    """`table_path` comes from the descriptor `export_commit` already read; without it the descriptor is read again."""
    started = time.monotonic()
    with status.lock(f"{repository}:{commit_id}:{table_name}", config.lock_ttl_seconds) as held:
        if not held:  # another delivery is exporting it; look again later (it will find the manifest)
            raise self.retry(countdown=config.lock_ttl_seconds / 3, max_retries=config.retry.max_retries + 50)
        status.set_table(repository, commit_id, table_name, "running", worker=self.request.hostname)
        lakefs = LakeFS(config.lakefs)
        try:
            table = (TableDescriptor(table_name, table_path, f"{DESCRIPTORS_PREFIX}{table_name}.yaml") if table_path
                     else find_table(lakefs, repository, commit_id, table_name))
            outcome = export_one_table(config, repository, ref, commit_id, table, lakefs=lakefs)
        except ExporterError as exc:
            outcome = ExportOutcome(table=table_name, table_path="", ok=False, error=str(exc), permanent=exc.permanent)
    facts = {"location": outcome.location, "checkpoint_version": outcome.checkpoint_version,
             "head_version": outcome.head_version, "files_rewritten": outcome.files_rewritten}
    line = (f"export {repository}/{commit_id}/{table_name} ref={ref} seconds={time.monotonic() - started:.2f} "
            f"attempt={self.request.retries + 1}")
    if outcome.ok:
        status.set_table(repository, commit_id, table_name, "done", reason="", skipped=outcome.skipped, **facts)
        status.count("lakefs_delta_tasks_total", {"task": "export_table", "outcome": "succeeded"})
        if not outcome.skipped:
            status.observe("lakefs_delta_export_seconds", outcome.seconds)
            status.count("lakefs_delta_versions_read_total", amount=outcome.versions)
            status.count("lakefs_delta_files_rewritten_total", amount=outcome.files_rewritten)
        log.info("%s outcome=%s", line, "exists" if outcome.skipped else "done")
        if outcome.table_path:
            precompute_diff.delay(repository, commit_id, outcome.table_path)
        return {"ok": True, **facts}
    if not outcome.permanent:
        try:
            status.set_table(repository, commit_id, table_name, "retrying", reason=outcome.error)
            status.count("lakefs_delta_tasks_total", {"task": "export_table", "outcome": "retried"})
            log.warning("%s outcome=retrying reason=%s", line, outcome.error)
            raise self.retry(countdown=backoff(self.request.retries), max_retries=config.retry.max_retries)
        except MaxRetriesExceededError:
            _abandon(repository, ref, commit_id, table_name)
    status.set_table(repository, commit_id, table_name, "failed", reason=outcome.error, **facts)
    status.count("lakefs_delta_tasks_total", {"task": "export_table", "outcome": "failed"})
    log.error("%s outcome=failed reason=%s", line, outcome.error)
    return {"ok": False, "error": outcome.error}


def _abandon(repository: str, ref: str, commit_id: str, table_name: str) -> None:
    """No retry will complete this export: remove what it wrote, so nothing half-written stays."""
    try:
        removed = abandon_export(config, repository, ref, commit_id, table_name)
        log.info("export %s/%s/%s abandoned: %d object(s) removed", repository, commit_id, table_name, removed)
    except ExporterError as exc:
        log.error("export %s/%s/%s abandoned, but removing its objects failed: %s", repository, commit_id, table_name, exc)


@app.task(name="lakefs_delta.catch_up")
def catch_up(branches: list[str] | None = None, depth: int | None = None) -> list[str]:
    """lakeFS never retries a post-hook: queue the recent commits whose export is incomplete."""
    lakefs = LakeFS(config.lakefs)
    queued = []
    for pair in branches or config.catch_up_branches:
        repository, branch = pair.split(":")
        for commit in lakefs.log(repository, branch, amount=depth or config.catch_up_depth):
            if missing_exports(config, repository, branch, commit.id, lakefs=lakefs):
                export_commit.delay(repository, branch, commit.id)
                queued.append(f"{repository}:{commit.id}")
    log.info("catch-up: %d commit(s) queued", len(queued))
    return queued


@app.task(bind=True, name="lakefs_delta.precompute_diff")
def precompute_diff(self, repository: str, commit_id: str, table_path: str) -> bool:
    """Cache the table's diff of this commit against its first parent, so the API answers from Redis."""
    lakefs = LakeFS(config.lakefs)
    started = time.monotonic()
    try:
        parents = lakefs.commit(repository, commit_id).parents
        _, cached = cached_diff(config, lakefs, diffs, repository, parents[0] if parents else None, commit_id, table_path)
    except ExporterError as exc:
        if exc.permanent or self.request.retries >= config.retry.max_retries:
            log.warning("diff %s/%s %s outcome=failed reason=%s", repository, commit_id, table_path, exc)
            return False
        raise self.retry(countdown=backoff(self.request.retries), max_retries=config.retry.max_retries)
    status.observe("lakefs_delta_diff_precompute_seconds", time.monotonic() - started)
    log.info("diff %s/%s %s outcome=%s seconds=%.2f", repository, commit_id, table_path,
             "cached" if cached else "computed", time.monotonic() - started)
    return True
