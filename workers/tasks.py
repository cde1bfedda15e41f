"""Celery tasks: they take ids, not objects, and call plain functions in `exporter`.

State is honest: every (repository, ref, commit, table) has one status record that ends `done` or
`failed` with a reason, and `done` is final. Transient errors (lakeFS or the object store down,
Redis errors, a task over its soft time limit) raise `Transient`, which Celery retries
(`autoretry_for`, `retry_backoff`, `retry_jitter`); when the retries run out, the task's
`on_failure` records the end. Waiting for another delivery's lock is not a retry.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import redis
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

from exporter.config import Config
from exporter.diff.datasets import DatasetsCache
from exporter.diff.datasets import list_datasets as find_datasets
from exporter.diff.overview import OverviewCache
from exporter.diff.overview import compare_refs as overview_of
from exporter.diff.rows import RowDiffCache, RowDiffTooLarge, cached_row_diff
from exporter.diff.rows import compute_row_diff as row_diff_of
from exporter.diff.rows import key_columns, worth_precomputing
from exporter.diff.table import DiffCache, cached_diff
from exporter.diff.table import compute_diff as diff_of
from exporter.errors import BranchTableRefused, ExporterError, ServiceUnavailable, WorkerLost
from exporter.branch_tables.table import append_commit
from exporter.upkeep.catch_up import CatchUpPlan, catch_up as find_missing_exports
from exporter.export.commit import abandon_export
from exporter.export.commit import export_iceberg as complete_iceberg
from exporter.export.commit import export_table as export_one_table
from exporter.export.commit import find_table
from exporter.export.manifest import PENDING
from exporter.export.log_writer import ExportOutcome
from exporter.upkeep.retention import prune as prune_exports
from exporter.kept import Kept
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import DESCRIPTORS_PREFIX, TableDescriptor, tables_to_export
from exporter.lakefs.table_log import checkpoint_files_hint
from exporter.state.connection import length_prefixed
from exporter.state.results import ResultCache
from exporter.state.status import COMMIT_RECORD, StatusStore
from workers.app import app, current_config, soft_time_limit

log = logging.getLogger("lakefs_delta.worker")


@functools.cache
def _services(config: Config) -> tuple[StatusStore, DiffCache]:
    return StatusStore(config.redis), DiffCache(config.redis, config.api.diff_cache_ttl_seconds)


@functools.cache
def _lakefs(config: Config) -> LakeFS:
    """One lakeFS client per worker process: its connections stay open from task to task."""
    return LakeFS(config.lakefs)


class Transient(Exception):
    """A failure a retry may fix (its message is the reason): Celery retries it (`autoretry_for`)
    with exponential backoff and full jitter, up to `retry.max_retries` (set by `configure`)."""


class RetriedTask(app.Task):
    """Defaults for a process whose app was finalized before `configure` set the annotations."""

    autoretry_for = (Transient,)
    retry_backoff = 2
    retry_backoff_max = 60
    retry_jitter = True


# What a task may meet that is not a bug: the library's errors, Redis, its own soft time limit.
TASK_ERRORS = (ExporterError, redis.RedisError, SoftTimeLimitExceeded)


def _transient_reason(exc: BaseException) -> str | None:
    """Why a retry may succeed, or None when the error is permanent."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return "timed out: the task ran past its soft time limit (tasks.time_limits, tasks.time_limit_seconds)"
    if isinstance(exc, redis.RedisError):
        return f"Redis error: {exc}"
    if isinstance(exc, ExporterError) and not exc.permanent:
        return str(exc)
    return None


def retry_if_transient(exc: BaseException, line: str, retries_left: bool = True) -> None:
    """The one retry policy: a transient error raises `Transient` (Celery retries it with backoff)
    while retries are left; a permanent one returns, for the task to record as it ends."""
    reason = _transient_reason(exc)
    if reason is not None and retries_left:
        log.warning("%s outcome=retrying reason=%s", line, reason)
        raise Transient(reason) from exc


class RunningElsewhere(Exception):
    """Another delivery of the same work is running it now."""


@contextmanager
def delivery(task, *work: object, sole: bool = False) -> Iterator[int]:
    """Count this delivery of `work` (the task's name and what identifies its work) until it ends,
    however it ends short of its worker dying; yields how many of its deliveries started without
    ending, this one included. Above `tasks.max_deliveries` the worker died on each of the others
    (killed for memory, past its hard time limit, killed outright): WorkerLost, which the task
    records as it records any permanent failure, so the message is not run into a dead worker again.

    `sole`: the delivery holds a renewed claim on the work while it runs (`_sole_delivery`), so a
    copy of the message delivered again while it runs ends with RunningElsewhere instead of running
    the work a second time or being counted as a death."""
    config = current_config()
    status, _ = _services(config)
    key = length_prefixed(task.name.removeprefix("lakefs_delta."), *work)  # a table path holds `:`
    with _sole_delivery(status, key, config.tasks.lock_ttl_seconds) if sole else nullcontext():
        starts = status.started(key)
        if starts > config.tasks.max_deliveries:
            raise WorkerLost(f"the worker running this task died {starts - 1} times (out of memory, past its time "
                             f"limit, or killed); not running it again (tasks.max_deliveries)")
        try:
            yield starts
        finally:
            status.finished(key)


@contextmanager
def _sole_delivery(status: StatusStore, key: str, ttl_seconds: int) -> Iterator[None]:
    """Redis delivers an unacknowledged message again once the visibility timeout passed, even while
    its first delivery still runs it (a Spark row diff may run for an hour). The first delivery
    holds a claim renewed every third of `ttl_seconds`; a copy waits out one TTL (a dead holder's
    claim lapses within it, and the copy then runs, counted as its redelivery) and, the claim still
    held, ends without running the work: the running delivery puts the answer where the API looks."""
    deadline = time.monotonic() + ttl_seconds + 1
    while True:
        with status.lock(f"delivery:{key}", ttl_seconds) as claim:
            if claim:
                yield
                return
        if time.monotonic() >= deadline:
            raise RunningElsewhere(f"another delivery has been running {key} for over {ttl_seconds} s "
                                   "(the message came again after tasks.visibility_timeout_seconds)")
        time.sleep(0.5)


# A precomputed diff waits behind every export in its queue: under a storm of commits the exports
# (what readers wait for) finish first, and the diffs after. Redis's priorities are BRPOP's order
# over one list per step (0, 3, 6, 9), the default (0) first; 9 is taken only when no message of a
# higher one waits. An export's Iceberg table waits behind the exports, before the diffs.
ICEBERG_STEP = 6
BACKGROUND = 9


def export_queue(config: Config, checkpoint_files: int) -> str | None:
    """The queue of a table's export: its own for large tables, else the default (None)."""
    return config.workers.large_table_queue if checkpoint_files >= config.workers.large_table_files else None


# a table's size is asked again after a minute: a routing hint, not a fact of the commit
_hints: Kept[tuple[str, str], int] = Kept(seconds=60.0)


def _checkpoint_files(lakefs: LakeFS, repository: str, commit_id: str, table_path: str) -> int:
    """The table's checkpoint size, for its queue: read once a minute per table, not per commit (a
    storm of commits to the same tables asked lakeFS for each), so a table that just grew past
    `workers.large_table_files` may have one more export on the default queue."""
    return _hints.keep((repository, table_path),
                       lambda: checkpoint_files_hint(lakefs, repository, commit_id, table_path))


def _delivered_from(task) -> str | None:
    """The queue the running task was taken from (its routing key): what it queues stays there."""
    return (task.request.delivery_info or {}).get("routing_key")


def _look_again_later(task, args: tuple, line: str, reason: str, countdown: float, kwargs: dict | None = None,
                      **options) -> dict:
    """Another delivery holds the lock of the task's work: the task again after `countdown`, on the
    queue it came from, without spending a retry (waiting for a lock is not a retry)."""
    task.apply_async(args, kwargs, countdown=countdown, retries=task.request.retries, queue=_delivered_from(task),
                     **options)
    log.info("%s outcome=requeued reason=%s", line, reason)
    return {"ok": None, "requeued": True}


@app.task(name="lakefs_delta.ping", ignore_result=False)
def ping(word: str) -> str:
    """Proves a worker is consuming from the broker."""
    return f"pong: {word}"


def _end_round(status: StatusStore, config: Config, task, task_id: str, exc: BaseException, repository: str, ref: str,
               commit_id: str, record_name: str, facet: str | None = None) -> str:
    """The one terminal rule of every task kind catch-up sends: a task whose retries ran out (or that
    was killed at its hard time limit) ends one round of its work `failed` on the work's record (its
    `facet` of it: the Iceberg table's, the branch table's), counted once per task id; after
    `tasks.max_rounds` rounds the failure is permanent and catch-up does not queue it again. The
    reason, returned, says which."""
    record = status.record(repository, ref, commit_id, record_name) or {}
    previous = (record.get(facet) or {}) if facet else record
    if previous.get("ended_task") == task_id:  # a round's cleanup killed at the hard limit ends it twice
        return previous.get("reason", "")
    rounds = (previous.get("rounds") or 0) + 1
    last = rounds >= config.tasks.max_rounds
    cause = (f"killed at its hard time limit ({exc.args[0]} s: tasks.time_limits, tasks.time_limit_seconds)"
             if isinstance(exc, TimeLimitExceeded) else exc)
    reason = f"gave up after {task.request.retries} retries: {cause}" + (
        f"; its retries ran out {rounds} times, it is not queued again (tasks.max_rounds)" if last else "")
    ended = {"rounds": rounds, "permanent": last, "reason": reason, "ended_task": task_id}
    if facet is None:
        _record(status, repository, ref, commit_id, record_name, "failed", **ended)
    else:
        status.add_facts(repository, ref, commit_id, record_name,
                         **{facet: {**previous, "state": "failed", **ended, "recorded_at": round(time.time(), 3)}})
    status_count(status, task.name.rsplit(".", 1)[1], "failed")
    log.error("%s %s/%s/%s/%s outcome=failed reason=%s", task.name, repository, ref, commit_id, record_name, reason)
    return reason


class ExportCommitTask(RetriedTask):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries ran out (or an unexpected error): the commit record ends a round `failed`, with the reason."""
        repository, ref, commit_id = args[:3]
        config = current_config()
        status, _ = _services(config)
        _end_round(status, config, self, task_id, exc, repository, ref, commit_id, COMMIT_RECORD)


@app.task(bind=True, base=ExportCommitTask, name="lakefs_delta.export_commit")
def export_commit(self, repository: str, ref: str, commit_id: str, all_tables: bool = False,
                  branch_table: bool = False) -> list[str]:
    """Find the tables to export (those the commit changed, or all of them for a tag) and fan out
    one `export_table` per table; with `branch_table`, each export then appends to the branch table."""
    config = current_config()
    status, _ = _services(config)
    try:
        with delivery(self, repository, ref, commit_id):
            lakefs = _lakefs(config)
            selection = tables_to_export(lakefs, repository, commit_id, every_table=all_tables)
            tables = selection.tables
            for descriptor, reason in selection.refused.items():
                status.set_table(repository, ref, commit_id, descriptor, "failed", reason=reason, permanent=True)
                log.warning("commit %s/%s: %s", repository, commit_id, reason)
            for table in tables:
                queue = export_queue(config, _checkpoint_files(lakefs, repository, commit_id, table.path))
                status.set_table(repository, ref, commit_id, table.name, "queued", table_path=table.path,
                                 **({"queue": queue} if queue else {}))
                export_table.apply_async((repository, ref, commit_id, table.name, table.path),
                                         {"branch_table": branch_table}, queue=queue)
            status.set_table(repository, ref, commit_id, COMMIT_RECORD, "done", reason="",
                             tables=[t.name for t in tables], all_tables=all_tables)
    except TASK_ERRORS as exc:
        if (reason := _transient_reason(exc)) is not None:
            _record(status, repository, ref, commit_id, COMMIT_RECORD, "retrying", reason=reason)
            status_count(status, "export_commit", "retried")
        retry_if_transient(exc, f"commit {repository}/{commit_id} ({ref})")
        log.error("commit %s/%s (%s): cannot list tables: %s", repository, commit_id, ref, exc)
        _record(status, repository, ref, commit_id, COMMIT_RECORD, "failed", reason=str(exc), permanent=True)
        status_count(status, "export_commit", "failed")
        return []
    log.info("commit %s/%s (%s): %d table(s) queued: %s", repository, commit_id, ref, len(tables),
             ", ".join(t.name for t in tables) or "-")
    status_count(status, "export_commit", "succeeded")
    return [t.name for t in tables]


class ExportTableTask(RetriedTask):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries ran out: under the export's lock, the record ends `failed` with the reason (for
        good after `tasks.max_rounds` such ends) and what the export wrote is removed; the record is
        written first, since the cleanup meets the store that may have failed the export. When the
        lock is held, another delivery is writing the export and its outcome is the record's.

        After the hard time limit killed the attempt (this runs in the worker's main process), the
        dead attempt's lock is held until its TTL: the end is recorded without it (a `done` record
        stays done) and the objects stay for the next delivery, which discards them first, or prune."""
        repository, ref, commit_id, table_name = args[:4]
        config = current_config()
        status, _ = _services(config)
        line = f"export {repository}/{ref}/{commit_id}/{table_name}"
        if isinstance(exc, TimeLimitExceeded):
            self._record_end(config, status, exc, task_id, repository, ref, commit_id, table_name)
            return
        try:
            with status.lock(status.export_lock(repository, ref, commit_id, table_name),
                             config.tasks.lock_ttl_seconds) as held:
                if not held:
                    log.info("%s: not abandoned, another delivery is writing it", line)
                    return
                self._record_end(config, status, exc, task_id, repository, ref, commit_id, table_name)
                removed = abandon_export(config, repository, ref, commit_id, table_name, lakefs=_lakefs(config))
            log.info("%s abandoned: %d object(s) removed", line, removed)
        except (ExporterError, redis.RedisError) as error:
            log.error("%s abandoned, but removing its objects failed: %s", line, error)

    def _record_end(self, config: Config, status: StatusStore, exc: BaseException, task_id: str, repository: str,
                    ref: str, commit_id: str, table_name: str) -> None:
        _end_round(status, config, self, task_id, exc, repository, ref, commit_id, table_name)


@app.task(bind=True, base=ExportTableTask, name="lakefs_delta.export_table")
def export_table(self, repository: str, ref: str, commit_id: str, table_name: str, table_path: str = "",
                 branch_table: bool = False) -> dict:
    """`table_path` comes from the descriptor `export_commit` already read; without it the descriptor is read again."""
    config = current_config()
    status, _ = _services(config)
    started = time.monotonic()
    line = f"export {repository}/{ref}/{commit_id}/{table_name} attempt={self.request.retries + 1}"
    try:
        with status.lock(status.export_lock(repository, ref, commit_id, table_name), config.tasks.lock_ttl_seconds) as held:
            if not held:  # another delivery is exporting it
                return _look_again_later(self, (repository, ref, commit_id, table_name, table_path), line,
                                         "another delivery holds the lock", config.tasks.lock_ttl_seconds / 3,
                                         {"branch_table": branch_table})
            with delivery(self, repository, ref, commit_id, table_name) as starts:
                status.set_table(repository, ref, commit_id, table_name, "running", worker=self.request.hostname,
                                 starts=starts)
                lakefs = _lakefs(config)
                table = (TableDescriptor(table_name, table_path, f"{DESCRIPTORS_PREFIX}{table_name}.yaml")
                         if table_path else find_table(lakefs, repository, commit_id, table_name))
                if not table_path:  # who may read the record is decided by the table's path
                    status.add_facts(repository, ref, commit_id, table_name, table_path=table.path)
                # refs with a finished export of this commit (a tag on an exported commit): copied, not redone
                done_under = tuple(other for other, tables in status.tables(repository, commit_id).items()
                                   if other != ref and tables.get(table_name, {}).get("state") == "done")
                outcome = export_one_table(config, repository, ref, commit_id, table, lakefs=lakefs,
                                           copy_from=done_under, still_held=held.still_held)
    except TASK_ERRORS as exc:
        reason = _transient_reason(exc)
        outcome = ExportOutcome(table=table_name, table_path=table_path, ok=False, error=reason or str(exc),
                                permanent=reason is None)
    facts = {"location": outcome.location, "checkpoint_version": outcome.checkpoint_version,
             "head_version": outcome.head_version, "files_rewritten": outcome.files_rewritten,
             **({"iceberg": outcome.iceberg} if outcome.iceberg is not None else {})}
    line += f" seconds={time.monotonic() - started:.2f}"
    if outcome.ok:
        _record(status, repository, ref, commit_id, table_name, "done", reason="", skipped=outcome.skipped, **facts)
        status_count(status, "export_table", "succeeded")
        if not outcome.skipped:
            status.observe("lakefs_delta_export_seconds", outcome.seconds)
            status.count("lakefs_delta_versions_read_total", amount=outcome.versions)
            status.count("lakefs_delta_files_rewritten_total", amount=outcome.files_rewritten)
        log.info("%s outcome=%s", line, "exists" if outcome.skipped else "done")
        if outcome.iceberg == PENDING:  # also when the export existed: a lost task is made up by the event delivered again
            export_iceberg.apply_async((repository, ref, commit_id, table_name), priority=ICEBERG_STEP,
                                       queue=_delivered_from(self))
        if outcome.table_path:
            precompute_diff.apply_async((repository, commit_id, outcome.table_path), priority=BACKGROUND)
        if branch_table:  # also when the export existed: a lost append is made up by the event delivered again
            append_branch_table.delay(repository, ref, commit_id, table_name)
        return {"ok": True, **facts}
    if not outcome.permanent:  # when this was the last retry, on_failure records the end
        _record(status, repository, ref, commit_id, table_name, "retrying", reason=outcome.error)
        status_count(status, "export_table", "retried")
        log.warning("%s outcome=retrying reason=%s", line, outcome.error)
        raise Transient(outcome.error)
    _record(status, repository, ref, commit_id, table_name, "failed", reason=outcome.error,
            permanent=outcome.permanent, **facts)
    status_count(status, "export_table", "failed")
    log.error("%s outcome=failed reason=%s", line, outcome.error)
    return {"ok": False, "error": outcome.error}


class ExportIcebergTask(RetriedTask):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries ran out: the export stands, its record's Iceberg facet ends a round `failed` with why
        it has no Iceberg table (its manifest still says pending: an event delivered again queues it
        again; catch-up, until the rounds run out)."""
        repository, ref, commit_id, table_name = args[:4]
        config = current_config()
        status, _ = _services(config)
        _end_round(status, config, self, task_id, exc, repository, ref, commit_id, table_name, facet="iceberg")


class AppendTask(RetriedTask):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries ran out: the commit's record says so (`branch_table`), a round of catch-up's appends."""
        repository, branch, commit_id, table_name = args[:4]
        config = current_config()
        status, _ = _services(config)
        _end_round(status, config, self, task_id, exc, repository, branch, commit_id, table_name, facet="branch_table")


@app.task(bind=True, base=ExportIcebergTask, name="lakefs_delta.export_iceberg")
def export_iceberg(self, repository: str, ref: str, commit_id: str, table_name: str) -> dict:
    """Write the Iceberg table of a complete export (`iceberg.enabled`), under the export's lock,
    the one prune deletes it under; the record goes on the export's status record."""
    config = current_config()
    status, _ = _services(config)
    started = time.monotonic()
    line = f"iceberg {repository}/{ref}/{commit_id}/{table_name} attempt={self.request.retries + 1}"
    try:
        with status.lock(status.export_lock(repository, ref, commit_id, table_name), config.tasks.lock_ttl_seconds) as held:
            if not held:  # the export is written again, or pruned
                return _look_again_later(self, (repository, ref, commit_id, table_name), line,
                                         "another delivery holds the export's lock", config.tasks.lock_ttl_seconds / 3,
                                         priority=ICEBERG_STEP)
            with delivery(self, repository, ref, commit_id, table_name):
                record = complete_iceberg(config, repository, ref, commit_id, table_name, lakefs=_lakefs(config),
                                          still_held=held.still_held)
    except TASK_ERRORS as exc:
        retry_if_transient(exc, line)
        record = {"state": "failed", "reason": str(exc)}
    seconds = time.monotonic() - started
    if record is None:
        log.info("%s outcome=gone seconds=%.2f reason=the export was pruned", line, seconds)
        return {"ok": None}
    _note_iceberg(status, repository, ref, commit_id, table_name, record)
    status.observe("lakefs_delta_iceberg_seconds", seconds)
    status.count("lakefs_delta_iceberg_metadata_total", {"outcome": record["state"]})
    status_count(status, "export_iceberg", "succeeded" if record["state"] == "written" else "failed")
    log.info("%s outcome=%s seconds=%.2f%s", line, record["state"], seconds,
             f" reason={record['reason']}" if record.get("reason") else "")
    return {"ok": record["state"] == "written", "iceberg": record}


def _note_iceberg(status: StatusStore, repository: str, ref: str, commit_id: str, table_name: str, record: dict) -> None:
    """The export's Iceberg record, on its status record, with when it was recorded."""
    try:
        status.add_facts(repository, ref, commit_id, table_name, iceberg={**record, "recorded_at": round(time.time(), 3)})
    except redis.RedisError as exc:
        log.warning("Iceberg record of %s/%s/%s/%s not recorded: %s", repository, ref, commit_id, table_name, exc)


def _record(status: StatusStore, repository: str, ref: str, commit_id: str, table: str, state: str, **facts) -> None:
    """A status write that must not lose the task's outcome: Redis errors are retried a few times."""
    for attempt in range(5):
        try:
            status.set_table(repository, ref, commit_id, table, state, **facts)
            return
        except redis.RedisError as exc:
            log.warning("status %s/%s/%s/%s=%s not recorded (attempt %d): %s", repository, ref, commit_id, table,
                        state, attempt + 1, exc)
            time.sleep(0.5 * 2 ** attempt)
    log.error("status %s/%s/%s/%s=%s lost: Redis unavailable", repository, ref, commit_id, table, state)


def status_count(status: StatusStore, task: str, outcome: str) -> None:
    try:
        status.count("lakefs_delta_tasks_total", {"task": task, "outcome": outcome})
    except redis.RedisError:
        pass  # a counter is not worth failing a task for


@app.task(name="lakefs_delta.catch_up")
def catch_up(repositories: list[str] | None = None) -> list[str]:
    """lakeFS never retries a post-hook: queue the commits and tags whose export is incomplete."""
    config = current_config()
    status, _ = _services(config)
    with status.lock("catch-up", config.tasks.time_limit("catch_up")) as held:
        if not held:  # another worker's beat is running it
            return []
        plan = find_missing_exports(config, _lakefs(config), status, repositories)
        send_catch_up(plan)
    status_count(status, "catch_up", "succeeded")
    try:
        status.set_gauge("lakefs_delta_catch_up_terminal_failures", len(plan.given_up))
    except redis.RedisError:
        pass
    log.info("catch-up: %s", plan.summary())
    return [f"{i.repository}:{i.ref}:{i.commit_id}" for i in plan.queued]


def send_catch_up(plan: CatchUpPlan) -> list[str]:
    """Queue what catch-up found, for the workers' periodic task and `lakefs-delta catch-up` alike: a
    line per task queued."""
    lines = []
    for item in plan.queued:
        export_commit.delay(item.repository, item.ref, item.commit_id, item.all_tables, branch_table=item.branch_table)
        lines.append(f"queued  {item.repository} {item.ref} {item.commit_id}  missing: {', '.join(item.tables)}")
    for repository, branch, commit_id, table in plan.appends:
        append_branch_table.delay(repository, branch, commit_id, table)
        lines.append(f"queued  {repository} {branch} {commit_id}  branch table {table} behind")
    for repository, ref, commit_id, table in plan.icebergs:
        export_iceberg.apply_async((repository, ref, commit_id, table), priority=ICEBERG_STEP)
        lines.append(f"queued  {repository} {ref} {commit_id}  Iceberg table of {table} still pending")
    return lines


@app.task(bind=True, base=AppendTask, name="lakefs_delta.append_branch_table")
def append_branch_table(self, repository: str, branch: str, commit_id: str, table_name: str) -> dict:
    """Bring the branch table to this commit's export, one append per (branch, table) at a time."""
    config = current_config()
    status, _ = _services(config)
    line = f"branch table {repository}/{branch}/{table_name} commit={commit_id}"
    try:
        with status.lock(f"branch-table:{repository}:{branch}:{table_name}", config.tasks.lock_ttl_seconds) as held:
            if not held:  # another append of this branch table is running: after it, this one
                return _look_again_later(self, (repository, branch, commit_id, table_name), line,
                                         "another append holds the lock", 1)
            with delivery(self, repository, branch, commit_id, table_name):
                outcome = append_commit(config, _lakefs(config), repository, branch, commit_id, table_name,
                                        still_held=held.still_held)
    except TASK_ERRORS as exc:
        retry_if_transient(exc, line)
        log.error("%s outcome=%s reason=%s", line, "refused" if isinstance(exc, BranchTableRefused) else "failed", exc)
        _note_branch_table(status, repository, branch, commit_id, table_name,
                           {"state": "refused" if isinstance(exc, BranchTableRefused) else "failed", "reason": str(exc),
                            "permanent": True})
        status_count(status, "append_branch_table", "failed")
        return {"ok": False, "error": str(exc)}
    _note_branch_table(status, repository, branch, commit_id, table_name,
                       {"state": "unchanged" if outcome.skipped else "appended", "reason": outcome.skipped or outcome.synthetic,
                        "head_version": outcome.head_version, "appended": outcome.appended,
                        **({"iceberg": outcome.iceberg} if outcome.iceberg is not None else {})})
    if outcome.iceberg is not None:
        status.count("lakefs_delta_iceberg_metadata_total", {"outcome": outcome.iceberg["state"]})
    status_count(status, "append_branch_table", "succeeded")
    log.info("%s outcome=%s", line, outcome.summary())
    return {"ok": True, "head_version": outcome.head_version, "appended": outcome.appended,
            "synthetic": outcome.synthetic, "skipped": outcome.skipped}


def _note_branch_table(status: StatusStore, repository: str, branch: str, commit_id: str, table_name: str,
                       branch_table: dict) -> None:
    """What the branch table did with this commit, on the commit's export record (`branch_table`)."""
    try:
        status.add_facts(repository, branch, commit_id, table_name, branch_table=branch_table)
    except redis.RedisError as exc:
        log.warning("branch table outcome of %s/%s/%s not recorded: %s", repository, commit_id, table_name, exc)


@app.task(name="lakefs_delta.prune")
def prune(repositories: list[str] | None = None) -> list[str]:
    """Delete per-commit exports outside the retention policy (beat, when `retention.interval_seconds` is set)."""
    config = current_config()
    status, _ = _services(config)
    lakefs = _lakefs(config)
    deleted: list[str] = []
    with status.lock("prune", config.tasks.time_limit("prune")) as held:
        if not held:  # another worker's beat is running it
            return []
        for repository in repositories or list(config.catch_up.repositories) or lakefs.list_repositories():
            try:
                plan = prune_exports(config, lakefs, repository)
            except ExporterError as exc:
                log.warning("prune %s outcome=failed reason=%s", repository, exc)
                continue
            deleted += plan.deleted
            log.info("prune %s", plan.summary())
    status_count(status, "prune", "succeeded")
    return deleted


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.precompute_diff")
def precompute_diff(self, repository: str, commit_id: str, table_path: str) -> bool:
    """Cache the table's diff of this commit against its first parent, so the API answers from Redis."""
    config = current_config()
    status, diffs = _services(config)
    lakefs = _lakefs(config)
    started = time.monotonic()
    try:
        with delivery(self, repository, commit_id, table_path):
            parents = lakefs.commit(repository, commit_id).parents
            parent = parents[0] if parents else None
            _, cached = cached_diff(config, lakefs, diffs, repository, parent, commit_id, table_path)
            if worth_precomputing(config, lakefs, repository, parent, commit_id, table_path):
                try:  # the row diff too: it reads little
                    cached_row_diff(config, lakefs, _row_diff_cache(config), repository, parent, commit_id,
                                    table_path, max_bytes=config.row_diff.precompute_bytes)
                except RowDiffTooLarge:
                    pass  # deletion vectors made it bigger than the objects that changed: computed when asked
    except TASK_ERRORS as exc:
        retry_if_transient(exc, f"diff {repository}/{commit_id} {table_path}")
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
                            lambda: diff_of(config, _lakefs(config), repository, left_commit, right_commit, table_path))


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.compute_row_diff")
def compute_row_diff(self, repository: str, left_commit: str | None, right_commit: str, table_path: str,
                     key: str = "-") -> bool:
    """A row diff the API was asked for: read from the differing files here, never in the web process.
    Run past its time limit it fails for good with the reason: started again it would begin from nothing."""
    config = current_config()
    cache, parts = _row_diff_cache(config), (repository, left_commit, right_commit, table_path, key)

    def compute() -> dict:
        try:
            return row_diff_of(config, _lakefs(config), repository, left_commit, right_commit, table_path,
                               key_columns(key), progress=lambda seen: cache.put_progress(seen, *parts))
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
                            lambda: overview_of(config, _lakefs(config), diffs, repository, left_commit, right_commit))


@functools.cache
def _overview_cache(config: Config) -> OverviewCache:
    return OverviewCache(config.redis, config.api.diff_cache_ttl_seconds)


@functools.cache
def _row_diff_cache(config: Config) -> RowDiffCache:
    return RowDiffCache(config.redis, config.api.diff_cache_ttl_seconds)


@app.task(bind=True, base=RetriedTask, name="lakefs_delta.list_datasets")
def list_datasets(self, repository: str, commit_id: str) -> bool:
    """The datasets of a commit the API was asked for: the walk over folders runs here."""
    config = current_config()
    return _compute_for_api(self, _datasets_cache(config), (repository, commit_id),
                            lambda: find_datasets(_lakefs(config), repository, commit_id))


@functools.cache
def _datasets_cache(config: Config) -> DatasetsCache:
    return DatasetsCache(config.redis, config.api.diff_cache_ttl_seconds)


def _compute_for_api(task, cache: ResultCache, parts: tuple, compute) -> bool:
    """Put `compute()` in the cache under `parts`, or why it cannot be had (the API answers with
    that status); transient errors retry while retries last."""
    started = time.monotonic()
    try:
        with delivery(task, *parts, sole=True):
            if cache.get(*parts) is None:  # another task (the precompute after an export) may have made it since
                cache.put(compute(), *parts)
        cache.release(*parts)
    except RunningElsewhere as exc:  # the running delivery answers; the API's claim stays its
        log.info("%s %s outcome=running-elsewhere reason=%s", cache.kind, " ".join(map(str, parts)), exc)
        return False
    except TASK_ERRORS as exc:
        retry_if_transient(exc, f"{cache.kind} {' '.join(map(str, parts))}", task.request.retries < task.max_retries)
        reason = _transient_reason(exc)
        cache.put_failure(exc if reason is None else ServiceUnavailable(reason), *parts)
        log.warning("%s %s outcome=failed reason=%s", cache.kind, " ".join(map(str, parts)), reason or exc)
        return False
    log.info("%s %s outcome=computed seconds=%.2f", cache.kind, " ".join(map(str, parts)), time.monotonic() - started)
    return True
