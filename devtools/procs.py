"""Processes as Linux's /proc shows them, for the benchmark and the tests: a process's memory, and
the JVMs running below given processes (a row diff's Spark job, a benchmark's own Spark)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def memory_mib(pid: int | str = "self") -> dict[str, float]:
    """A process's resident memory now (`VmRSS`) and its peak so far (`VmHWM`), in MiB; empty when
    the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024  # kB
    return found


def _table() -> dict[int, tuple[int, list[bytes]]]:
    """Every process: pid -> (parent pid, command line)."""
    found = {}
    for folder in Path("/proc").iterdir():
        if folder.name.isdigit():
            try:
                parent = int((folder / "stat").read_text().rsplit(")", 1)[1].split()[1])
                found[int(folder.name)] = (parent, (folder / "cmdline").read_bytes().split(b"\0"))
            except OSError:
                continue  # ended meanwhile
    return found


def jvms_below(is_root: Callable[[int, list[bytes]], bool], within: int | None = None) -> list[int]:
    """The java processes descending from a process `is_root(pid, command line)` holds for; with
    `within`, only such processes that descend from process `within` (another test process's are not
    this one's to see)."""
    processes = _table()

    def below(pid: int, ancestors: set[int]) -> bool:
        while pid > 1:
            pid = processes.get(pid, (0, []))[0]
            if pid in ancestors:
                return True
        return False

    roots = {pid for pid, (_, command) in processes.items() if is_root(pid, command)
             and (within is None or below(pid, {within}))}
    return [pid for pid, (_, command) in processes.items()
            if command and command[0].endswith(b"java") and below(pid, roots)]
