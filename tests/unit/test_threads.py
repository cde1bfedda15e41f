"""The process's kept threads (`exporter.threads`): a piece of work's calls run at most its number
at once, on threads kept from one piece of work to the next; a block that raises drops its calls not
started; a forked child starts threads of its own."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from exporter.threads import IoPool, io_pool, process_threads

pytestmark = pytest.mark.unit


def test_at_most_its_number_of_calls_run_at_once_and_results_come_in_order():
    running, most, lock = 0, 0, threading.Lock()

    def call(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return n * n

    with io_pool(3) as pool:
        squares = list(pool.map(call, range(12)))
    assert squares == [n * n for n in range(12)]
    assert most == 3


def test_a_second_piece_of_work_runs_on_the_threads_the_first_started():
    def ident(_) -> int:
        time.sleep(0.005)
        return threading.get_ident()

    with io_pool(4) as pool:
        list(pool.map(ident, range(8)))
    before = {t.ident for t in threading.enumerate()}
    with io_pool(4) as pool:
        second = set(pool.map(ident, range(8)))
    assert {t.ident for t in threading.enumerate()} == before  # no thread started for it
    assert second <= before - {threading.get_ident()}  # the kept threads, not this one


def test_a_block_that_raises_drops_the_calls_not_started_and_does_not_wait_for_those_running():
    release, started = threading.Event(), []

    def call(n: int) -> None:
        started.append(n)
        release.wait(5)

    began = time.monotonic()
    with pytest.raises(RuntimeError, match="stopped"):
        with io_pool(2) as pool:
            futures = [pool.submit(call, n) for n in range(6)]
            while len(started) < 2:
                time.sleep(0.001)
            raise RuntimeError("stopped")
    assert time.monotonic() - began < 2  # the two running calls were not waited for
    assert [f.cancelled() for f in futures] == [False, False, True, True, True, True]
    release.set()
    futures[0].result(5), futures[1].result(5)
    assert sorted(started) == [0, 1]


def test_join_waits_for_every_call_and_calls_cancelled_while_waiting_are_skipped():
    gate = threading.Event()
    pool = IoPool(1)
    first = pool.submit(gate.wait, 5)
    skipped = pool.submit(lambda: pytest.fail("a cancelled call ran"))
    last = pool.submit(lambda: "last")
    assert skipped.cancel()
    gate.set()
    pool.join()
    assert first.result() is True and skipped.cancelled() and last.result() == "last"


def test_an_error_in_a_call_reaches_its_caller():
    with io_pool(2) as pool:
        failed = pool.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result()


def _in_child(queue) -> None:
    with io_pool(2) as pool:
        queue.put(sum(pool.map(lambda n: n, range(5))))


def test_a_forked_child_starts_threads_of_its_own():
    parents = process_threads()
    parents.submit(lambda: None).result()  # the parent's threads exist as it forks
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    total = queue.get(timeout=20)
    child.join(20)
    assert child.exitcode == 0 and total == 10  # a child using the parent's (absent) threads would hang

