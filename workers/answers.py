"""The tasks that compute what the API waits for (diffs, row diffs, overviews, datasets) and the
diff precomputed after an export: each puts its answer, or why there is none, where the API looks."""

from __future__ import annotations

import logging
import time

from celery.exceptions import SoftTimeLimitExceeded

from exporter.config import Config, soft_time_limit
from exporter.diff.datasets import DatasetsCache
from exporter.diff.datasets import list_datasets as find_datasets
from exporter.diff.overview import OverviewCache
from exporter.diff.overview import compare_refs as overview_of
from exporter.diff.rows.compute import RowDiffCache, RowDiffQuery, RowDiffTooLarge, cached_row_diff
from exporter.diff.rows.compute import compute_row_diff as row_diff_of
from exporter.diff.rows.compute import key_columns, worth_precomputing
from exporter.diff.table import cached_diff
from exporter.diff.table import compute_diff as diff_of
from exporter.errors import ServiceUnavailable
from exporter.state.results import ResultCache
from workers.app import app, current_config
from workers.delivery import (TASK_ERRORS, RetriedTask, RunningElsewhere, _lake, _services, _transient_reason,
                              delivery, once_per_config, retry_if_transient)

log = logging.getLogger("lakefs_delta.worker")


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.precompute_diff")
def precompute_diff(self, repository: str, commit_id: str, table_path: str) -> bool:
    """Cache the table's diff of this commit against its first parent, so the API answers from Redis."""
    config = current_config()
    status, diffs = _services(config)
    lakefs = _lake(config).lakefs
    started = time.monotonic()
    try:
        with delivery(self, repository, commit_id, table_path):
            parents = lakefs.commit(repository, commit_id).parents
            parent = parents[0] if parents else None
            _, cached = cached_diff(_lake(config), diffs, repository, parent, commit_id, table_path)
            if worth_precomputing(_lake(config), repository, parent, commit_id, table_path):
                try:  # the row diff too: it reads little
                    query = RowDiffQuery(repository, parent, commit_id, table_path)
                    cached_row_diff(_lake(config), _row_diff_cache(config), query,
                                    max_bytes=config.row_diff.precompute_bytes)
                except RowDiffTooLarge:
                    pass  # deletion vectors made it bigger than the objects that changed: computed when asked
    except TASK_ERRORS as exc:
        retry_if_transient(self, exc, f"diff {repository}/{commit_id} {table_path}")
        log.warning("diff %s/%s %s outcome=failed reason=%s", repository, commit_id, table_path, exc)
        return False
    status.observe("lakefs_delta_diff_precompute_seconds", time.monotonic() - started)
    log.info("diff %s/%s %s outcome=%s seconds=%.2f", repository, commit_id, table_path,
             "cached" if cached else "computed", time.monotonic() - started)
    return True


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.compute_diff")
def compute_diff(self, repository: str, left_commit: str | None, right_commit: str, table_path: str) -> bool:
    """A diff the API was asked for and did not have: computed here, never in the web process."""
    config = current_config()
    _, diffs = _services(config)
    return _compute_for_api(self, diffs, (repository, left_commit, right_commit, table_path),
                            lambda: diff_of(_lake(config), repository, left_commit, right_commit, table_path))


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.compute_row_diff")
def compute_row_diff(self, repository: str, left_commit: str | None, right_commit: str, table_path: str,
                     key: str = "-") -> bool:
    """A row diff the API was asked for: read from the differing files here, never in the web process.
    Run past its time limit it fails for good with the reason: started again it would begin from nothing."""
    config = current_config()
    cache, parts = _row_diff_cache(config), (repository, left_commit, right_commit, table_path, key)

    def compute() -> dict:
        try:
            query = RowDiffQuery(repository, left_commit, right_commit, table_path, key_columns(key))
            return row_diff_of(_lake(config), query, progress=lambda seen: cache.put_progress(seen, *parts))
        except SoftTimeLimitExceeded:
            limit = config.tasks.time_limit(self.name)
            raise RowDiffTooLarge(f"the row diff ran past its time limit ({soft_time_limit(limit)} s of {limit} s: "
                                  "tasks.time_limits.compute_row_diff)") from None
    return _compute_for_api(self, cache, parts, compute)


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.compare_refs")
def compare_refs(self, repository: str, left_commit: str, right_commit: str) -> bool:
    """Every table that differs between two commits, for the API's overview."""
    config = current_config()
    _, diffs = _services(config)
    return _compute_for_api(self, _overview_cache(config), (repository, left_commit, right_commit),
                            lambda: overview_of(_lake(config), diffs, repository, left_commit, right_commit))


@once_per_config
def _overview_cache(config: Config) -> OverviewCache:
    return OverviewCache(config.redis, config.api.diff_cache_ttl_seconds)


@once_per_config
def _row_diff_cache(config: Config) -> RowDiffCache:
    return RowDiffCache(config.redis, config.api.diff_cache_ttl_seconds)


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.list_datasets")
def list_datasets(self, repository: str, commit_id: str) -> bool:
    """The datasets of a commit the API was asked for: the walk over folders runs here."""
    config = current_config()
    return _compute_for_api(self, _datasets_cache(config), (repository, commit_id),
                            lambda: find_datasets(_lake(config).lakefs, repository, commit_id))


@once_per_config
def _datasets_cache(config: Config) -> DatasetsCache:
    return DatasetsCache(config.redis, config.api.diff_cache_ttl_seconds)


def _compute_for_api(task, cache: ResultCache, parts: tuple, compute) -> bool:
    """Put `compute()` in the cache under `parts`, or why it cannot be had (the API answers with
    that status); transient errors retry while retries last."""
    started = time.monotonic()
    try:
        with delivery(task, *parts):
            if cache.get(*parts) is None:  # another task (the precompute after an export) may have made it since
                cache.put(compute(), *parts)
        cache.release(*parts)
    except RunningElsewhere as exc:  # the running delivery answers; the API's claim stays its
        log.info("%s %s outcome=running-elsewhere reason=%s", cache.kind, " ".join(map(str, parts)), exc)
        return False
    except TASK_ERRORS as exc:
        retry_if_transient(task, exc, f"{cache.kind} {' '.join(map(str, parts))}", last_attempt_records=True)
        reason = _transient_reason(exc)
        cache.put_failure(exc if reason is None else ServiceUnavailable(reason), *parts)
        log.warning("%s %s outcome=failed reason=%s", cache.kind, " ".join(map(str, parts)), reason or exc)
        return False
    log.info("%s %s outcome=computed seconds=%.2f", cache.kind, " ".join(map(str, parts)), time.monotonic() - started)
    return True
