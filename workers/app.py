"""The Celery app on Redis, configured from the `Config` its process was given (never at import).

`lakefs-delta worker`, `serve`, `catch-up` and `export` load their config (`--config FILE`,
then `LAKEFS_DELTA_*`) and call `configure`; tasks read it back with `current_config`. Tasks live
in `workers.tasks` (exports, branch tables, catch-up, prune) and `workers.answers` (what the API
waits for), over `workers.delivery` (the retry policy, delivery counts, queues, status records),
and stay thin wrappers over `exporter`.
"""

from __future__ import annotations

from celery import Celery

from exporter.config import TASK_KINDS, Config, soft_time_limit

app = Celery("lakefs_delta", include=["workers.tasks", "workers.answers"])
_config: Config | None = None

TASK_NAMES = tuple(f"lakefs_delta.{kind}" for kind in TASK_KINDS)


def configure(config: Config) -> Celery:
    """Point the app at the config's Redis and set its delivery and time-limit rules."""
    global _config
    moved = _config is None or _config.redis != config.redis  # None: a connection opened before any
    _config = config                                              # configure() went to Celery's default broker
    if moved:  # Celery keeps its broker connections: without this, tasks still went to the first Redis
        app._pool = None
        app.amqp._producer_pool = None
    app.conf.update(
        broker_url=config.redis,
        result_backend=config.redis,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_acks_late=True,  # a killed worker's task goes back to the queue...
        task_reject_on_worker_lost=True,  # ...instead of being acknowledged as lost
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": config.tasks.visibility_timeout_seconds},
        result_backend_transport_options={"visibility_timeout": config.tasks.visibility_timeout_seconds},
        result_expires=24 * 3600,
        task_ignore_result=True,  # outcomes live in the status records; `ping` keeps its result
        worker_concurrency=config.workers.concurrency,
        worker_max_memory_per_child=config.workers.max_memory_per_child_mib * 1024,  # KiB
        broker_connection_retry_on_startup=True,
        # below the visibility timeout, so a slow task is stopped before the broker hands it out again;
        # the soft limit raises inside the task, which then retries with the reason
        task_annotations={name: {"soft_time_limit": soft_time_limit(config.tasks.time_limit(name)),
                                 "time_limit": config.tasks.time_limit(name),
                                 # Celery's autoretry: exponential backoff with full jitter; the
                                 # budget of each attempt is set as it fails (workers.delivery)
                                 "max_retries": config.tasks.retry.max_retries,
                                 "retry_backoff": config.tasks.retry.backoff()[0],
                                 "retry_backoff_max": config.tasks.retry.backoff()[1]}
                          for name in TASK_NAMES},
        beat_schedule={"catch-up": {"task": "lakefs_delta.catch_up",
                                    "schedule": float(config.catch_up.interval_seconds)},
                       # prune deletes: scheduled only when retention.interval_seconds is set
                       **({"prune": {"task": "lakefs_delta.prune", "schedule": float(config.retention.interval_seconds)}}
                          if config.retention.interval_seconds else {})},
    )
    return app


def current_config() -> Config:
    if _config is None:
        raise RuntimeError("workers.app.configure(config) was not called in this process: "
                           "start workers with `lakefs-delta worker [--config FILE]`")
    return _config
