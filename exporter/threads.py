"""Threads for object-store and lakeFS requests: a pool that, when the caller stops (an error, the
task's soft time limit raised in the main thread), stops at once instead of waiting for requests
still in flight, which would hold the task until its hard time limit killed the worker."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

IO_THREADS = 16  # requests in flight at once for one piece of work (a log's reads, an export's writes)
T, R = TypeVar("T"), TypeVar("R")


@contextmanager
def io_pool(threads: int) -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(threads)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # requests in flight end on their own timeouts
        raise
    pool.shutdown(wait=True)


def prefetched(read: Callable[[T], R], items: Iterable[T], window: int = IO_THREADS) -> Iterator[R]:
    """`read` of each item, in order, with up to `window` reads in flight ahead of the one consumed:
    a sequence of small objects read at the speed of `window` requests at once, in bounded memory."""
    with io_pool(window) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(read, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
