"""Small measuring helpers shared by the benchmarks."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def peak_rss_mib() -> float:
    """This process's peak resident memory. Linux's `ru_maxrss` survives `execve` (a fresh child
    reports its parent's peak from before the exec), so `VmHWM`, which starts anew with each
    program, is read first."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def own_redis_database(redis_url: str, database: int) -> str:
    """`redis_url` pointed at a database of the benchmark's own, emptied first: what an earlier run
    left there (its precomputed diffs still queued, status records) is not this run's load, and the
    events of a benchmark queue nothing where a running demo's workers take tasks."""
    import redis

    url = f"{redis_url.rsplit('/', 1)[0]}/{database}"
    redis.Redis.from_url(url).flushdb()
    return url


def _program(pid: int, argv: list[str]) -> str:
    """The part of the stack a process is, by its command line."""
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if pid == os.getpid():
        return "bench client"
    if name.startswith(("lakefs-", "acl-")) or name in ("lakefs", "acl"):
        return "lakeFS"
    if name.startswith("minio"):
        return "MinIO"
    if name.startswith("redis-server"):
        return "Redis"
    if "lakefs_delta.cli" in argv:
        return {"serve": "webhook service", "worker": "workers"}.get(next((a for a in argv if a in ("serve", "worker")), ""),
                                                                    "other")
    return "other"


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Every process's CPU time so far (user + system, seconds), by pid, with the part of the stack it is."""
    tick = os.sysconf("SC_CLK_TCK")
    seen = {}
    for pid, program in _processes():
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # ended while listed
            continue
        seen[pid] = (program, (int(fields[11]) + int(fields[12])) / tick, int(fields[1]))
    # a pool's children (Celery's, uvicorn's) are the part their parent is, whatever they call themselves
    return {pid: (seen[parent][0] if program == "other" and parent in seen else program, seconds)
            for pid, (program, seconds, parent) in seen.items()}


def thread_cpu_seconds(programs: tuple[str, ...] = ("MinIO", "lakeFS")) -> dict[str, float]:
    """The CPU seconds so far of the stack's parts `programs`, to the nanosecond: the sum of their
    live threads' (`/proc/<pid>/task/*/schedstat`), where `cpu_seconds` counts in the kernel's ticks
    (10 ms: a tenth of a 10,000-file Iceberg step). A thread that ended is not counted: Go's (MinIO's,
    lakeFS's) live as long as their process."""
    used: dict[str, float] = {}
    for pid, program in _processes():
        if program not in programs:
            continue
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # ended while listed
            continue
        nanoseconds = sum(_task_nanoseconds(f"/proc/{pid}/task/{task}/schedstat") for task in tasks)
        used[program] = used.get(program, 0.0) + nanoseconds / 1e9
    return used


def _processes() -> Iterator[tuple[int, str]]:
    """Every process's pid and the part of the stack it is (`_program`); one that ends while listed is left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:  # ended while listed
            continue
        yield int(entry), _program(int(entry), argv)


def _task_nanoseconds(schedstat: str) -> int:
    try:
        return int(open(schedstat).read().split()[0])
    except OSError:  # the thread ended while listed
        return 0


def wait_until_quiet(most_seconds: float = 60.0, busy_cores: float = 0.1, window: float = 0.5) -> float:
    """Wait until the machine's processes together keep less than `busy_cores` of a core busy over
    `window` seconds (a table just built leaves lakeFS collecting, a MinIO just started scans its
    drive: a cold 10,000-file export measured 0.11-0.20 s right after, 0.10 s later), at most
    `most_seconds`; the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < most_seconds:
        busy, total = _machine_ticks()
        time.sleep(window)
        busy_after, total_after = _machine_ticks()
        if (busy_after - busy) / max(total_after - total, 1) * (os.cpu_count() or 1) < busy_cores:
            break
    return time.monotonic() - started


def _machine_ticks() -> tuple[int, int]:
    """The machine's busy and all CPU ticks so far (/proc/stat: user, nice, system, idle, iowait, irq,
    softirq, steal; all but idle and iowait are busy; guest time is in user's already)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def cpu_used(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each part of the stack used between two `cpu_seconds()`: a process started in
    between counts whole; one that ended in between is lost (the stack's processes, the service and
    the workers' children live through a run)."""
    used: dict[str, float] = {}
    for pid, (program, seconds) in after.items():
        used[program] = used.get(program, 0.0) + seconds - before.get(pid, (program, 0.0))[1]
    return used


def driver_peak(mib: float | None) -> str:
    """A Spark job's driver peak as a row names it ("–" when no JVM was seen: the job ran in the worker)."""
    return f"Spark driver peak {mib:,.0f} MiB" if mib else "Spark driver peak –"
