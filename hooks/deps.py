"""What the API's routes share: the services built once per app (`Services`, on `app.state`) and
results computed by the workers (`from_workers`). Who may read what is the request's grant (`hooks.grant`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from celery import Celery
from fastapi import Depends
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.config import Config
from exporter.diff.datasets import DatasetsCache
from exporter.diff.overview import OverviewCache
from exporter.diff.rows.compute import RowDiffCache
from exporter.diff.table import DiffCache
from exporter.lakefs.client import LakeFS
from exporter.lakefs.lake import Lake
from exporter.lakefs.table_folders import TableFolders
from exporter.state.results import ResultCache
from exporter.state.status import StatusStore
from hooks.auth import RepositoryAccess
from hooks.metrics import ServiceMetrics
from hooks.models import Computing

log = logging.getLogger("lakefs_delta.hooks")
AUTH_NONE_WARNING = "api.auth is none: the API answers anyone who reaches it"
# the answer of a route whose result a worker computes, while it is not there yet
COMPUTING = {202: {"model": Computing, "description": "not computed yet: ask again after Retry-After"}}
WEBHOOK_THREADS = 8  # webhook answers publishing at once (each a Redis write and a queue publish)


@dataclass(frozen=True)
class Services:
    config: Config
    status: StatusStore
    queue: Celery  # publishes by task name; this process never runs tasks
    access: RepositoryAccess
    metrics: ServiceMetrics
    diffs: DiffCache
    datasets: DatasetsCache
    row_diffs: RowDiffCache
    overviews: OverviewCache
    # /readyz probes run on their own threads with a deadline: a hung dependency never takes the
    # threads that webhook publishing needs
    probes: ThreadPoolExecutor
    # The webhook's own thread capacity: readers (Delta Sharing answers, diffs, datasets) may hold
    # every thread of anyio's default limiter (40), while lakeFS waits for the webhook's answer
    # within its action timeout.
    webhook_threads: anyio.CapacityLimiter
    lake: Lake  # what the library reads through: one lakeFS client and the object stores, for every request
    folders: TableFolders  # the folders each table's files live in at a commit, which the grant asks lakeFS about

    @classmethod
    def start(cls, config: Config, lake: Lake) -> "Services":
        from workers.app import configure  # the receiver only publishes, by task name; it never runs tasks

        status, ttl = StatusStore(config.redis), config.api.diff_cache_ttl_seconds
        return cls(config, status, configure(config), RepositoryAccess(config), ServiceMetrics(status.metrics),
                   DiffCache(config.redis, ttl), DatasetsCache(config.redis, ttl), RowDiffCache(config.redis, ttl),
                   OverviewCache(config.redis, ttl), ThreadPoolExecutor(2, thread_name_prefix="readyz"),
                   anyio.CapacityLimiter(WEBHOOK_THREADS), lake, TableFolders(lake))

    def lakefs(self) -> LakeFS:
        return self.lake.lakefs

    def warm_up(self) -> None:
        """Make Celery's result backend and open the broker's and the status store's connections
        before the first event, which otherwise paid for them (3 s measured with 60 sharing answers
        streaming from the process); a broker down now is the first event's 503 to report, not the start's."""
        try:
            self.queue.backend  # the first publish made the result backend (imports: 0.14 s idle, seconds when busy)
            with self.queue.producer_or_acquire() as producer:
                producer.connection.ensure_connection(max_retries=1)
            self.status.redis.ping()
        except Exception as exc:  # kombu/redis raise many types when the broker is down
            log.warning("broker not reachable at start: %s", type(exc).__name__)
        # What the start made (modules, the app, these clients) lives as long as the process: out of
        # the collector's reach, a full collection walks only what answers made since. Each walked
        # it all: pauses of up to 125 ms, a cached diff's slowest answers (API: max 148 ms -> 19 ms).
        gc.freeze()


async def services(request: Request) -> Services:
    """The app's services. A coroutine: FastAPI runs a plain function dependency on anyio's default
    threads, which readers may all hold, and the webhook must answer whatever they do."""
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(services)]


async def from_workers(services: Services, cache: ResultCache, task: str, parts: tuple) -> tuple[bool, Any]:
    """(was it cached, the result): from the cache, else queued on the workers (once, however
    many ask) and waited for up to `api.diff_wait_seconds`; the result is None when it is not there
    yet. A failure the worker recorded is raised, to be answered as if met here. Heavy work never
    runs in this process."""
    found = await run_in_threadpool(cache.get, *parts)
    if found is not None:
        return True, found
    if await run_in_threadpool(cache.claim, services.config.tasks.time_limit(task), *parts):
        await run_in_threadpool(lambda: services.queue.send_task(task, parts))
    deadline = time.monotonic() + services.config.api.diff_wait_seconds
    while True:
        found = await run_in_threadpool(cache.get, *parts)
        if found is not None:
            return False, found
        failure = await run_in_threadpool(cache.failure, *parts)
        if failure is not None:
            raise failure
        if time.monotonic() >= deadline:
            return False, None
        await asyncio.sleep(0.25)


def still_computing(progress: dict | None = None) -> Response:
    return JSONResponse({"status": "computing", "retry_after_seconds": 2, "progress": progress}, status_code=202,
                        headers={"Retry-After": "2"})
