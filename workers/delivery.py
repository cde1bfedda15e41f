"""How the workers' tasks are delivered: one retry policy, each delivery counted (and, for work
the API waits for, held while it runs), the queues an export's follow-ups take, and the status
records and counters every task writes."""

from __future__ import annotations

import functools
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar
from contextlib import contextmanager, nullcontext

import redis
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_init
from kombu import Producer

from exporter.config import SOLE_DELIVERY_KINDS, Config
from exporter.diff.table import DiffCache
from exporter.errors import ExporterError, WorkerLost
from exporter.kept import Kept
from exporter.lakefs.client import LakeFS
from exporter.lakefs.lake import Lake
from exporter.lakefs.table_log import checkpoint_files_hint
from exporter.state.connection import length_prefixed
from exporter.state.status import Counted, StatusStore, counted
from exporter.storage.objectstore import warm
from workers.app import app, current_config

log = logging.getLogger("lakefs_delta.worker")
T = TypeVar("T")


def once_per_config(build: Callable[[Config], T]) -> Callable[[Config], T]:
    """`build(config)` once per config object, kept by the object itself rather than by its value:
    a frozen Config's hash is computed from its every field at each lookup, and a storm's tasks
    looked their clients up that way for 2 % of the workers' CPU."""
    built: dict[int, tuple[Config, T]] = {}

    @functools.wraps(build)
    def once(config: Config) -> T:
        found = built.get(id(config))
        if found is None or found[0] is not config:  # the config is kept with it: its id is not reused
            found = built[id(config)] = (config, build(config))
        return found[1]

    return once


@once_per_config
def _services(config: Config) -> tuple[StatusStore, DiffCache]:
    return StatusStore(config.redis), DiffCache(config.redis, config.api.diff_cache_ttl_seconds)


@once_per_config
def _lake(config: Config) -> Lake:
    """What this worker process's tasks work on, built once: one lakeFS client (its connections stay
    open from task to task) and the object stores."""
    return Lake.connect(config)


@worker_process_init.connect
def _warm(**_) -> None:
    """Each pool process builds its clients as it starts, so the first tasks of a storm wait for none.
    What fails here is built again by the first task that needs it, which reports it: never the
    pool process's start."""
    config = current_config()
    try:
        _services(config), _lake(config), warm(config)
    except Exception as exc:  # noqa: BLE001 (the first task meets it again, and says why)
        log.warning("clients not built as the worker process started: %s", exc)
    keep_what_the_start_made()


def keep_what_the_start_made() -> None:
    """What a worker process's start made (modules, the app, its clients: about 107,000 objects)
    lives as long as it does: out of the collector's reach, a full collection walks only what tasks
    made since. Each walked it all: a pause of 63 ms in a cold 100,000-file Iceberg step of 220 ms."""
    gc.freeze()


@contextmanager
def sending() -> Iterator[Producer]:
    """A producer for a task's follow-up tasks (`apply_async(..., producer=...)`): their messages go to
    Redis together as the block ends, in one round trip where each took its own (a send cost the
    sending process 0.6-0.8 ms of CPU alone, 0.4-0.5 ms so); a block that raises sends none."""
    with app.producer_or_acquire() as producer, producer.batch():
        yield producer


class Transient(Exception):
    """A failure a retry may fix (its message is the reason): Celery retries it (`autoretry_for`)
    with exponential backoff and full jitter, up to the budget `retry_if_transient` set for it."""


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


def _is_outage(exc: BaseException) -> bool:
    """A service the task needs is down (lakeFS, the object store, Redis): it may be back in minutes."""
    return isinstance(exc, redis.RedisError) or getattr(exc, "outage", False)


def retries_for(outage: bool) -> int:
    """The retry budget of a transient error: an outage's lasts `tasks.retry.outage_seconds`, any
    other's `tasks.retry.max_retries` retries."""
    policy = current_config().tasks.retry
    return policy.outage_retries() if outage else policy.max_retries


def retry_if_transient(task, exc: BaseException, line: str, last_attempt_records: bool = False) -> None:
    """The one retry policy: a transient error raises `Transient` (Celery retries it with backoff)
    within its budget (`retries_for`; a restart of lakeFS outlasts any count of quick retries); a
    permanent one returns, for the task to record as it ends. With `last_attempt_records`, the
    attempt whose budget is spent returns too (the task records the failure itself), else its
    `Transient` ends the task and its `on_failure` records it."""
    reason = _transient_reason(exc)
    if reason is None:
        return
    budget = retries_for(_is_outage(exc))
    if last_attempt_records and task.request.retries >= budget:
        return
    log.warning("%s outcome=retrying reason=%s", line, reason)
    raise retrying(task, reason, _is_outage(exc)) from exc


def retrying(task, reason: str, outage: bool) -> Transient:
    """The `Transient` that retries this attempt of `task`, its budget set for Celery's autoretry
    (which reads `override_max_retries`)."""
    task.override_max_retries = retries_for(outage)
    return Transient(reason)


class RunningElsewhere(Exception):
    """Another delivery of the same work is running it now."""


@contextmanager
def delivery(task, *work: object) -> Iterator[int]:
    """Count this delivery of `work` (the task's name and what identifies its work) until it ends,
    however it ends short of its worker dying; yields how many of its deliveries started without
    ending, this one included. Above `tasks.max_deliveries` the worker died on each of the others
    (killed for memory, past its hard time limit, killed outright): WorkerLost, which the task
    records as it records any permanent failure, so the message is not run into a dead worker again.

    A task of SOLE_DELIVERY_KINDS (those whose time limits may pass the visibility timeout) holds a
    renewed claim on the work while it runs (`_sole_delivery`), so a copy of the message delivered
    again while it runs ends with RunningElsewhere instead of running the work a second time or
    being counted as a death."""
    config = current_config()
    status, _ = _services(config)
    kind = task.name.removeprefix("lakefs_delta.")
    key = length_prefixed(kind, *work)  # a table path holds `:`
    with _sole_delivery(status, key, config.tasks.lock_ttl_seconds) if kind in SOLE_DELIVERY_KINDS else nullcontext():
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
            raise RunningElsewhere(f"another delivery holds {key} and renewed its claim within {ttl_seconds} s "
                                   "(the message came again after tasks.visibility_timeout_seconds while it runs)")
        time.sleep(0.5)


# A precomputed diff waits behind every export in its queue: under a storm of commits the exports
# (what readers wait for) finish first, and the diffs after. Redis's priorities are BRPOP's order
# over one list per step (0, 3, 6, 9), the default (0) first; 9 is taken only when no message of a
# higher one waits. An export's Iceberg table waits behind the exports, before the diffs.
ICEBERG_STEP = 6
BACKGROUND = 9


# An export hands its Iceberg step's task the log files it wrote from memory (its new commits) in
# the message when they are this small together: the step then does not read them back (in a commit
# storm, one GET a table export of the object store's 20 or so).
HELD_IN_MESSAGE_BYTES = 64 * 1024


def held_for_message(held: Mapping[str, bytes]) -> dict[str, str]:
    """`held` as a message carries it (the text of each file), or nothing when it is larger than
    HELD_IN_MESSAGE_BYTES or not all UTF-8 (as Delta's JSON files are): the step reads them then."""
    if sum(len(raw) for raw in held.values()) > HELD_IN_MESSAGE_BYTES:
        return {}
    try:
        return {name: raw.decode() for name, raw in held.items()}
    except UnicodeDecodeError:
        return {}


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


def status_count(status: StatusStore, task: str, outcome: str, *also: Counted) -> None:
    """The task's outcome counted, and the counters `also` names with it (one round trip)."""
    try:
        status.tally([counted("lakefs_delta_tasks_total", {"task": task, "outcome": outcome}), *also])
    except redis.RedisError:
        pass  # a counter is not worth failing a task for
