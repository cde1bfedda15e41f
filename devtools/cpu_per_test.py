"""Where the suite's CPU goes, test by test: a pytest plugin, and its summary.

    .venv/bin/pytest -p devtools.cpu_per_test ...     (or PYTEST_ADDOPTS="-p devtools.cpu_per_test" make test)
    python -m devtools.cpu_per_test tests/artifacts/cpu.jsonl

Around each test it reads, from /proc, the CPU seconds (user + system, with those of reaped
children) of the test process's tree: the process, its JVMs (`java`: the Spark session, jobs run
in the process) and its other children (workers, services), and of its stack's own processes
(lakeFS, MinIO, Redis: those whose working directory is the stack's). A JSON line per test goes to
`LAKEFS_DELTA_TEST_CPU_OUT` (default tests/artifacts/cpu.jsonl). A process that leaves its parent
(a JVM whose Python exited first) takes its CPU with it: the figures are a floor.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("self", "java", "children", "services")
OUT = Path(os.environ.get("LAKEFS_DELTA_TEST_CPU_OUT", Path(__file__).resolve().parent.parent / "tests" / "artifacts"
                          / "cpu.jsonl"))


def _processes() -> dict[int, tuple[str, int, float]]:
    """pid -> (command name, parent pid, CPU seconds with its reaped children's)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        found[int(name)] = (text[text.index("(") + 1:text.rindex(")")], int(fields[1]),
                            sum(int(f) for f in fields[11:15]) / _TICK)
    return found


def cpu_now() -> dict[str, float]:
    """This process's tree and its stack's processes, by kind, in CPU seconds."""
    processes = _processes()
    children = collections.defaultdict(list)
    for pid, (_, parent, _) in processes.items():
        children[parent].append(pid)
    spent = dict.fromkeys(KINDS, 0.0)
    tree, pending = set(), [os.getpid()]
    while pending:
        pid = pending.pop()
        tree.add(pid)
        command, _, seconds = processes.get(pid, ("", 0, 0.0))
        spent["self" if pid == os.getpid() else "java" if command == "java" else "children"] += seconds
        pending.extend(children[pid])
    stack_dir = os.path.realpath(os.environ.get("LAKEFS_DELTA_STACK_DIR", "/nonexistent"))
    for pid, (_, _, seconds) in processes.items():
        try:
            if pid not in tree and os.path.realpath(f"/proc/{pid}/cwd") == stack_dir:
                spent["services"] += seconds
        except OSError:
            continue
    return spent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before, started = cpu_now(), time.monotonic()
    yield
    after = cpu_now()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as out:
        out.write(json.dumps({"test": item.nodeid, "process": os.environ.get("PYTEST_XDIST_WORKER", "gw0"),
                              "wall": round(time.monotonic() - started, 2),
                              **{kind: round(after[kind] - before[kind], 2) for kind in KINDS}}) + "\n")


def summary(lines: list[dict]) -> str:
    """CPU and wall seconds by module, most CPU first."""
    modules: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in lines:
        module = modules[line["test"].split("::")[0].rsplit("/", 1)[-1]]
        module.update({"tests": 1, "wall": line["wall"], **{kind: line[kind] for kind in KINDS}})
    rows = [f"{'CPU s':>8} {'wall s':>8} " + " ".join(f"{kind:>9}" for kind in KINDS) + "  tests  module"]
    for name, m in sorted(modules.items(), key=lambda item: -sum(item[1][k] for k in KINDS)):
        rows.append(f"{sum(m[k] for k in KINDS):8.1f} {m['wall']:8.1f} " + " ".join(f"{m[k]:9.1f}" for k in KINDS)
                    + f"  {m['tests']:5d}  {name}")
    total = {kind: sum(line[kind] for line in lines) for kind in KINDS}
    rows.append(f"{sum(total.values()):8.1f} {sum(line['wall'] for line in lines):8.1f} "
                + " ".join(f"{total[k]:9.1f}" for k in KINDS) + f"  {len(lines):5d}  all")
    return "\n".join(rows)


if __name__ == "__main__":
    print(summary([json.loads(line) for line in Path(sys.argv[1] if len(sys.argv) > 1 else OUT).read_text().splitlines()
                   if line.strip()]))
