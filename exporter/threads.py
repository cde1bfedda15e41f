"""Threads for object-store and lakeFS requests: a pool that, when the caller stops (an error, the
task's soft time limit raised in the main thread), stops at once instead of waiting for requests
still in flight, which would hold the task until its hard time limit killed the worker.

Its threads block the time-limit signals (Celery's soft limit is SIGUSR1; SIGALRM for timers), so
the kernel delivers them to the main thread: a signal a pool thread took would interrupt no
request, and the main thread, blocked in one, would hear of it only at its socket's read timeout."""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

IO_THREADS = 16  # requests in flight at once for one piece of work (a log's reads, an export's writes)
T, R = TypeVar("T"), TypeVar("R")


TIME_LIMIT_SIGNALS = {signal.SIGUSR1, signal.SIGALRM}


def io_threads(threads: int) -> ThreadPoolExecutor:
    """A thread pool whose threads leave the time-limit signals to the main thread."""
    return ThreadPoolExecutor(threads, initializer=signal.pthread_sigmask, initargs=(signal.SIG_BLOCK, TIME_LIMIT_SIGNALS))


@contextmanager
def io_pool(threads: int) -> Iterator[ThreadPoolExecutor]:
    pool = io_threads(threads)
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
