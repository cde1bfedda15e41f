"""Threads for object-store and lakeFS requests: a pool that, when the caller stops (an error, the
task's soft time limit raised in the main thread), stops at once instead of waiting for requests
still in flight, which would hold the task until its hard time limit killed the worker."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

IO_THREADS = 16  # requests in flight at once for one piece of work (a log's reads, an export's writes)


@contextmanager
def io_pool(threads: int) -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(threads)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # requests in flight end on their own timeouts
        raise
    pool.shutdown(wait=True)
