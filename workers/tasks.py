"""Celery tasks: they take ids, not objects, and call plain functions in `exporter`.

State is honest: every (repository, ref, commit, table) has one status record that ends `done` or
`failed` with a reason, and `done` is final. Transient errors (lakeFS or the object store down,
Redis errors, a task over its soft time limit) raise `Transient`, which Celery retries
(`autoretry_for`, `retry_backoff`, `retry_jitter`); when the retries run out, the task's
`on_failure` records the end. Waiting for another delivery's lock is not a retry.
"""

from __future__ import annotations

import logging
import time

import redis
from celery.exceptions import TimeLimitExceeded

from exporter.branch_tables.table import append_commit
from exporter.config import Config
from exporter.errors import BranchTableRefused, ExporterError
from exporter.export.commit import abandon_export
from exporter.export.commit import export_iceberg as complete_iceberg
from exporter.export.commit import export_table as export_one_table
from exporter.export.job import ExportAt
from exporter.export.commit import find_table
from exporter.export.log_writer import ExportOutcome
from exporter.export.manifest import IcebergState, iceberg_state
from exporter.lakefs.descriptors import DESCRIPTORS_PREFIX, TableChanges, TableDescriptor, known_changes, tables_to_export
from exporter.state.status import COMMIT_RECORD, StatusStore, counted, observed
from exporter.upkeep.catch_up import CatchUpPlan, catch_up as find_missing_exports
from exporter.upkeep.retention import prune as prune_exports
from workers.answers import precompute_diff
from workers.app import app, current_config
from workers.delivery import (BACKGROUND, ICEBERG_STEP, TASK_ERRORS, RetriedTask, _checkpoint_files,
                              _delivered_from, _lake, _look_again_later, _record, _services, _transient_reason,
                              delivery, export_queue, retry_if_transient, retrying, sending, held_for_message,
                              status_count)

log = logging.getLogger("lakefs_delta.worker")


@app.task(name="lakefs_delta.ping", ignore_result=False)
def ping(word: str) -> str:
    """Proves a worker is consuming from the broker."""
    return f"pong: {word}"


def _end_round(status: StatusStore, config: Config, task, task_id: str, exc: BaseException,
               work: tuple[str, str, str, str], facet: str | None = None) -> str:
    """The one terminal rule of every task kind catch-up sends: a task whose retries ran out (or that
    was killed at its hard time limit) ends one round of its work `failed` on the work's record (its
    `facet` of it: the Iceberg table's, the branch table's), counted once per task id; after
    `tasks.max_rounds` rounds the failure is permanent and catch-up does not queue it again. The
    reason, returned, says which. `work`: (repository, ref, commit, record name)."""
    repository, ref, commit_id, record_name = work
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
        _end_round(status, config, self, task_id, exc, (repository, ref, commit_id, COMMIT_RECORD))


@app.task(bind=True, base=ExportCommitTask, name="lakefs_delta.export_commit")
def export_commit(self, repository: str, ref: str, commit_id: str, all_tables: bool = False,
                  branch_table: bool = False) -> list[str]:
    """Find the tables to export (those the commit changed, or all of them for a tag) and fan out
    one `export_table` per table; with `branch_table`, each export then appends to the branch table."""
    config = current_config()
    status, _ = _services(config)
    try:
        with delivery(self, repository, ref, commit_id):
            lakefs = _lake(config).lakefs
            selection = tables_to_export(lakefs, repository, commit_id, every_table=all_tables)
            tables = selection.tables
            for descriptor, reason in selection.refused.items():
                status.set_table(repository, ref, commit_id, descriptor, "failed", reason=reason, permanent=True)
                log.warning("commit %s/%s: %s", repository, commit_id, reason)
            with sending() as producer:
                for table in tables:
                    queue = export_queue(config, _checkpoint_files(lakefs, repository, commit_id, table.path))
                    status.set_table(repository, ref, commit_id, table.name, "queued", table_path=table.path,
                                     **({"queue": queue} if queue else {}))
                    known = known_changes(lakefs, repository, commit_id, table)  # not asked of lakeFS again there
                    export_table.apply_async((repository, ref, commit_id, table.name, table.path),
                                             {"branch_table": branch_table,
                                              **({"changes": known.as_message()} if known else {})}, queue=queue,
                                             producer=producer)
            status.set_table(repository, ref, commit_id, COMMIT_RECORD, "done", reason="",
                             tables=[t.name for t in tables], all_tables=all_tables)
    except TASK_ERRORS as exc:
        if (reason := _transient_reason(exc)) is not None:
            _record(status, repository, ref, commit_id, COMMIT_RECORD, "retrying", reason=reason)
            status_count(status, "export_commit", "retried")
        retry_if_transient(self, exc, f"commit {repository}/{commit_id} ({ref})")
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
            _end_round(status, config, self, task_id, exc, (repository, ref, commit_id, table_name))
            return
        try:
            with status.lock(status.export_lock(repository, ref, commit_id, table_name),
                             config.tasks.lock_ttl_seconds) as held:
                if not held:
                    log.info("%s: not abandoned, another delivery is writing it", line)
                    return
                _end_round(status, config, self, task_id, exc, (repository, ref, commit_id, table_name))
                removed = abandon_export(_lake(config), repository, ref, commit_id, table_name)
            log.info("%s abandoned: %d object(s) removed", line, removed)
        except (ExporterError, redis.RedisError) as error:
            log.error("%s abandoned, but removing its objects failed: %s", line, error)


@app.task(bind=True, base=ExportTableTask, name="lakefs_delta.export_table")
def export_table(self, repository: str, ref: str, commit_id: str, table_name: str, table_path: str = "",
                 branch_table: bool = False, changes: dict | None = None) -> dict:
    """`table_path` comes from the descriptor `export_commit` already read; without it the descriptor is
    read again. `changes`: the commit's parent and the table's changes since, as `export_commit` found
    them (`TableChanges`); without them the export asks lakeFS."""
    config = current_config()
    status, _ = _services(config)
    started = time.monotonic()
    line = f"export {repository}/{ref}/{commit_id}/{table_name} attempt={self.request.retries + 1}"
    try:
        with status.lock(status.export_lock(repository, ref, commit_id, table_name), config.tasks.lock_ttl_seconds) as held:
            if not held:  # another delivery is exporting it
                return _look_again_later(self, (repository, ref, commit_id, table_name, table_path), line,
                                         "another delivery holds the lock", config.tasks.lock_ttl_seconds / 3,
                                         {"branch_table": branch_table, "changes": changes})
            with delivery(self, repository, ref, commit_id, table_name) as starts:
                status.set_table(repository, ref, commit_id, table_name, "running", worker=self.request.hostname,
                                 starts=starts)
                lakefs = _lake(config).lakefs
                table = (TableDescriptor(table_name, table_path, f"{DESCRIPTORS_PREFIX}{table_name}.yaml")
                         if table_path else find_table(lakefs, repository, commit_id, table_name))
                if not table_path:  # who may read the record is decided by the table's path
                    status.add_facts(repository, ref, commit_id, table_name, table_path=table.path)
                # refs with a finished export of this commit (a tag on an exported commit): copied, not redone
                done_under = tuple(other for other, tables in status.tables(repository, commit_id).items()
                                   if other != ref and tables.get(table_name, {}).get("state") == "done")
                outcome = export_one_table(_lake(config), ExportAt(repository, ref, commit_id), table,
                                           copy_from=done_under, still_held=held.still_held,
                                           known=TableChanges.from_message(changes) if changes else None)
    except TASK_ERRORS as exc:
        reason = _transient_reason(exc)
        outcome = ExportOutcome(table=table_name, table_path=table_path, ok=False, error=reason or str(exc),
                                permanent=reason is None)
    # an Iceberg table written with the export (`light_iceberg_step`) is recorded and counted with it
    iceberg_now = not outcome.skipped and iceberg_state(outcome.iceberg) not in (None, IcebergState.PENDING)
    iceberg = {**outcome.iceberg, "recorded_at": round(time.time(), 3)} if iceberg_now else outcome.iceberg
    facts = {"location": outcome.location, "checkpoint_version": outcome.checkpoint_version,
             "head_version": outcome.head_version, "files_rewritten": outcome.files_rewritten,
             **({"iceberg": iceberg} if iceberg is not None else {})}
    line += f" seconds={time.monotonic() - started:.2f}"
    if outcome.ok:
        _record(status, repository, ref, commit_id, table_name, "done", reason="", skipped=outcome.skipped, **facts)
        status_count(status, "export_table", "succeeded",
                     *([counted("lakefs_delta_iceberg_metadata_total", {"outcome": iceberg["state"]})] if iceberg_now else []),
                     *([] if outcome.skipped else
                       [*observed("lakefs_delta_export_seconds", outcome.seconds),
                        counted("lakefs_delta_versions_read_total", amount=outcome.versions),
                        counted("lakefs_delta_files_rewritten_total", amount=outcome.files_rewritten)]))
        log.info("%s outcome=%s", line, "exists" if outcome.skipped else "done")
        # not written with the export (the default; with iceberg.same_task, one not light or one a retry may
        # write): a task of its own, behind the exports; also when the export existed: a lost task is made up
        # by the event delivered again
        with sending() as producer:
            if iceberg_state(outcome.iceberg) is IcebergState.PENDING:
                held = held_for_message(outcome.held)
                export_iceberg.apply_async((repository, ref, commit_id, table_name), {"held": held} if held else {},
                                           kwargsrepr=f"{{'held': {sorted(held)}}}", priority=ICEBERG_STEP,
                                           queue=_delivered_from(self), producer=producer)
            if outcome.table_path:
                precompute_diff.apply_async((repository, commit_id, outcome.table_path), priority=BACKGROUND,
                                            producer=producer)
            if branch_table:  # also when the export existed: a lost append is made up by the event delivered again
                append_branch_table.apply_async((repository, ref, commit_id, table_name), producer=producer)
        return {"ok": True, **facts}
    if not outcome.permanent:  # when this was the last retry, on_failure records the end
        _record(status, repository, ref, commit_id, table_name, "retrying", reason=outcome.error)
        status_count(status, "export_table", "retried")
        log.warning("%s outcome=retrying reason=%s", line, outcome.error)
        raise retrying(self, outcome.error, outcome.outage)
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
        _end_round(status, config, self, task_id, exc, (repository, ref, commit_id, table_name), facet="iceberg")


class AppendTask(RetriedTask):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries ran out: the commit's record says so (`branch_table`), a round of catch-up's appends."""
        repository, branch, commit_id, table_name = args[:4]
        config = current_config()
        status, _ = _services(config)
        _end_round(status, config, self, task_id, exc, (repository, branch, commit_id, table_name),
                   facet="branch_table")


@app.task(bind=True, base=ExportIcebergTask, name="lakefs_delta.export_iceberg")
def export_iceberg(self, repository: str, ref: str, commit_id: str, table_name: str,
                   held: dict[str, str] | None = None) -> dict:
    """Write the Iceberg table of a complete export (`iceberg.enabled`), under the export's lock,
    the one prune deletes it under; the record goes on the export's status record. `held`: the log
    files the export handed over (`held_for_message`), not read back."""
    config = current_config()
    status, _ = _services(config)
    started = time.monotonic()
    line = f"iceberg {repository}/{ref}/{commit_id}/{table_name} attempt={self.request.retries + 1}"
    try:
        with status.lock(status.export_lock(repository, ref, commit_id, table_name), config.tasks.lock_ttl_seconds) as lock:
            if not lock:  # the export is written again, or pruned
                return _look_again_later(self, (repository, ref, commit_id, table_name), line,
                                         "another delivery holds the export's lock", config.tasks.lock_ttl_seconds / 3,
                                         {"held": held} if held else None, priority=ICEBERG_STEP)
            with delivery(self, repository, ref, commit_id, table_name):
                record = complete_iceberg(_lake(config), repository, ref, commit_id, table_name,
                                          still_held=lock.still_held,
                                          held={name: text.encode() for name, text in (held or {}).items()})
    except TASK_ERRORS as exc:
        retry_if_transient(self, exc, line)
        record = {"state": IcebergState.FAILED.value, "reason": str(exc)}
    seconds = time.monotonic() - started
    if record is None:
        log.info("%s outcome=gone seconds=%.2f reason=the export was pruned", line, seconds)
        return {"ok": None}
    _note_iceberg(status, repository, ref, commit_id, table_name, record)
    written = iceberg_state(record) is IcebergState.WRITTEN
    status_count(status, "export_iceberg", "succeeded" if written else "failed",
                 *observed("lakefs_delta_iceberg_seconds", seconds),
                 counted("lakefs_delta_iceberg_metadata_total", {"outcome": record["state"]}))
    log.info("%s outcome=%s seconds=%.2f%s", line, record["state"], seconds,
             f" reason={record['reason']}" if record.get("reason") else "")
    return {"ok": written, "iceberg": record}


def _note_iceberg(status: StatusStore, repository: str, ref: str, commit_id: str, table_name: str, record: dict) -> None:
    """The export's Iceberg record, on its status record, with when it was recorded."""
    try:
        status.add_facts(repository, ref, commit_id, table_name, iceberg={**record, "recorded_at": round(time.time(), 3)})
    except redis.RedisError as exc:
        log.warning("Iceberg record of %s/%s/%s/%s not recorded: %s", repository, ref, commit_id, table_name, exc)


@app.task(name="lakefs_delta.catch_up")
def catch_up(repositories: list[str] | None = None) -> list[str]:
    """lakeFS never retries a post-hook: queue the commits and tags whose export is incomplete."""
    config = current_config()
    status, _ = _services(config)
    with status.lock("catch-up", config.tasks.time_limit("catch_up")) as held:
        if not held:  # another worker's beat is running it
            return []
        plan = find_missing_exports(_lake(config), status, repositories)
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
                outcome = append_commit(_lake(config), repository, branch, commit_id, table_name,
                                        still_held=held.still_held)
    except TASK_ERRORS as exc:
        retry_if_transient(self, exc, line)
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
    status_count(status, "append_branch_table", "succeeded",
                 *([counted("lakefs_delta_iceberg_metadata_total", {"outcome": outcome.iceberg["state"]})]
                   if outcome.iceberg is not None else []))
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
    lakefs = _lake(config).lakefs
    deleted: list[str] = []
    with status.lock("prune", config.tasks.time_limit("prune")) as held:
        if not held:  # another worker's beat is running it
            return []
        for repository in repositories or list(config.catch_up.repositories) or lakefs.list_repositories():
            try:
                plan = prune_exports(_lake(config), repository)
            except ExporterError as exc:
                log.warning("prune %s outcome=failed reason=%s", repository, exc)
                continue
            deleted += plan.deleted
            log.info("prune %s", plan.summary())
    status_count(status, "prune", "succeeded")
    return deleted
