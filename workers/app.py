"""The Celery app on Redis. Tasks live in `workers.tasks` and stay thin wrappers over `exporter`."""

from __future__ import annotations

from celery import Celery

from exporter.config import load_config

config = load_config()

app = Celery("lakefs_delta", broker=config.redis_url, backend=config.redis_url, include=["workers.tasks"])
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_acks_late=True,  # a killed worker's task goes back to the queue...
    task_reject_on_worker_lost=True,  # ...instead of being acknowledged as lost
    worker_prefetch_multiplier=1,
    broker_transport_options={"visibility_timeout": config.visibility_timeout_seconds},
    result_backend_transport_options={"visibility_timeout": config.visibility_timeout_seconds},
    result_expires=24 * 3600,
    worker_concurrency=config.worker_concurrency,
    broker_connection_retry_on_startup=True,
)

if config.catch_up_branches:
    app.conf.beat_schedule = {
        "catch-up": {"task": "lakefs_delta.catch_up", "schedule": float(config.catch_up_interval_seconds)},
    }
