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
