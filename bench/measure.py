"""Small measuring helpers shared by the benchmarks."""

from __future__ import annotations

import resource


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
