"""The bench's measuring helpers: the wait for a quiet machine before a cold export
(`bench.measure.wait_until_quiet`), the CPU of the stack's parts (`thread_cpu_seconds`)."""

import threading
import time

import pytest

from bench import measure

pytestmark = pytest.mark.unit


def test_the_wait_ends_at_the_first_quiet_window_or_at_its_bound(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(measure.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(measure.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setattr(measure.os, "cpu_count", lambda: 2)
    # windows of 100 ticks: 1.5 cores busy twice, then 0.04 of a core
    ticks = iter([(0, 0), (75, 100), (75, 100), (150, 200), (150, 200), (152, 300)])
    monkeypatch.setattr(measure, "_machine_ticks", lambda: next(ticks))
    assert measure.wait_until_quiet(window=0.5) == 1.5

    always_busy = iter((i * 90, i * 100) for i in range(10_000))
    monkeypatch.setattr(measure, "_machine_ticks", lambda: next(always_busy))
    assert measure.wait_until_quiet(most_seconds=3.0, window=0.5) == 3.0


def test_the_machines_ticks_are_read_from_proc():
    busy, total = measure._machine_ticks()
    assert 0 < busy < total


def test_a_parts_cpu_is_read_to_the_nanosecond_from_its_threads():
    """`thread_cpu_seconds` of this process (the part "bench client"): a busy thread's CPU counted
    while it lives, finer than the kernel's 10 ms ticks."""
    done, busy = threading.Event(), threading.Event()

    def spin() -> None:
        ended = time.thread_time() + 0.003  # 3 ms of CPU: under a tick
        while time.thread_time() < ended:
            pass
        busy.set()
        done.wait()

    before = measure.thread_cpu_seconds(("bench client",))["bench client"]
    thread = threading.Thread(target=spin)
    thread.start()
    busy.wait()
    used = measure.thread_cpu_seconds(("bench client",))["bench client"] - before
    done.set()
    thread.join()
    assert 0.003 <= used < 0.5
    assert measure.thread_cpu_seconds(("no such part",)) == {}
