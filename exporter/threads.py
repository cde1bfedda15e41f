"""Threads for object-store and lakeFS requests: each process keeps its threads from task to task
(`IoPool`, over one pool per process), and a piece of work that stops (an error, the task's soft time
limit raised in the main thread) drops its calls not started instead of waiting for those in flight,
which would hold the task until its hard time limit killed the worker.

The threads block the time-limit signals (Celery's soft limit is SIGUSR1; SIGALRM for timers), so
the kernel delivers them to the main thread: a signal a pool thread took would interrupt no
request, and the main thread, blocked in one, would hear of it only at its socket's read timeout."""

from __future__ import annotations

import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

IO_THREADS = 16  # requests in flight at once for one piece of work (a log's reads, an export's writes)
# The process's threads: started as its pieces of work first need them, then kept. A pool started
# for a piece of work and stopped after it cost 1.8 ms of CPU for six calls (the threads' starts),
# the same calls on kept threads 0.12 ms; a storm's table export started about a dozen threads so.
# Calls beyond this many at once (several pieces of work in one process, locks being renewed) wait
# for a thread.
PROCESS_THREADS = 64
T, R = TypeVar("T"), TypeVar("R")


TIME_LIMIT_SIGNALS = {signal.SIGUSR1, signal.SIGALRM}


def io_threads(threads: int) -> ThreadPoolExecutor:
    """A thread pool whose threads leave the time-limit signals to the main thread."""
    return ThreadPoolExecutor(threads, initializer=signal.pthread_sigmask, initargs=(signal.SIG_BLOCK, TIME_LIMIT_SIGNALS))


_kept: ThreadPoolExecutor | None = None
_keeping = threading.Lock()


def _forked() -> None:
    """A forked child (a Celery pool process) has none of its parent's threads: it starts its own."""
    global _kept, _keeping
    _kept, _keeping = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)


def process_threads() -> ThreadPoolExecutor:
    """This process's kept threads (`PROCESS_THREADS` at most)."""
    global _kept
    if _kept is None:
        with _keeping:
            if _kept is None:
                _kept = io_threads(PROCESS_THREADS)
    return _kept


class IoPool:
    """A piece of work's calls (`submit`, `map`, as an executor's) on the process's kept threads, up
    to `threads` of them running at once; the others wait here, not started, and `cancel` drops them.
    `join` waits for every call submitted."""

    def __init__(self, threads: int):
        self.threads = threads
        self._waiting: deque[tuple[Future, Callable, tuple]] = deque()
        self._running = self._unfinished = 0
        self._changed = threading.Condition()

    def submit(self, call: Callable[..., R], *args) -> "Future[R]":
        future: Future = Future()
        with self._changed:
            self._waiting.append((future, call, args))
            self._unfinished += 1
        self._start()
        return future

    def map(self, call: Callable[..., R], *iterables: Iterable) -> Iterator[R]:
        """Every call submitted at once; their results in order. A consumer that stops early
        cancels those not started."""
        futures = [self.submit(call, *args) for args in zip(*iterables)]

        def results() -> Iterator[R]:
            try:
                for future in futures:
                    yield future.result()
            finally:
                for future in futures:
                    future.cancel()
        return results()

    def _start(self) -> None:
        """Another thread taking the waiting calls (`_drain`), unless `threads` of them run."""
        with self._changed:
            if self._running >= self.threads or not self._waiting:
                return
            self._running += 1
        process_threads().submit(self._drain)

    def _drain(self) -> None:
        """The waiting calls, one after another on this thread, until none waits: a call handed to a
        thread of its own cost about 100 µs of CPU in handoffs (a 1.5 KB PUT to MinIO: 238 µs, 114 µs
        in the caller's thread)."""
        while True:
            with self._changed:
                if not self._waiting:
                    self._running -= 1
                    self._changed.notify_all()
                    return
                future, call, args = self._waiting.popleft()
            if future.set_running_or_notify_cancel():  # else cancelled while it waited
                try:
                    result = call(*args)
                except BaseException as exc:  # noqa: BLE001 (the caller meets it in `result()`)
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._changed:
                self._unfinished -= 1
                self._changed.notify_all()

    def cancel(self) -> None:
        """Drop the calls not started; those running end on their own (their requests' timeouts)."""
        with self._changed:
            dropped, self._waiting = list(self._waiting), deque()
            self._unfinished -= len(dropped)
            self._changed.notify_all()
        for future, _, _ in dropped:
            future.cancel()

    def join(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._unfinished == 0)


@contextmanager
def io_pool(threads: int) -> Iterator[IoPool]:
    """An `IoPool` for the block: when the block raises, its calls not started are dropped and those
    running are not waited for; else every call ends before the block does."""
    pool = IoPool(threads)
    try:
        yield pool
        pool.join()
    except BaseException:
        pool.cancel()
        raise


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
