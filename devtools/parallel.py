"""One stack per test process: `scripts/test.sh` runs the integration tests in several processes
(pytest-xdist, a module at a time), and each process talks only to its own lakeFS, MinIO, Redis,
Spark cluster and test services, so no test sees another's queue, repositories or ports.

    python -m devtools.parallel N    the variables of process N's stack, as `export` lines

Process 0 keeps the environment's stack. Process N's lives in a directory beside it, every port
5,000 × N higher, below the kernel's ephemeral ports (32768 and up here): a listening port there
can be taken by any connection's own end (a third process's at 10,000 × N had a test service
refused its port, 38140: "address already in use"). Nothing here imports `devtools.stack`: it reads its directory and ports on import.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

# Every port a stack and the tests' services listen on, with its default (`devtools.stack`,
# `tests.conftest.SERVICE_PORT`: the tests' services take ports above that one; `devtools.demo`)
PORTS = {"LAKEFS_DELTA_STACK_LAKEFS_PORT": 18000, "LAKEFS_DELTA_STACK_ACL_PORT": 18001,
         "LAKEFS_DELTA_STACK_MINIO_PORT": 19000, "LAKEFS_DELTA_STACK_MINIO_CONSOLE_PORT": 19001,
         "LAKEFS_DELTA_STACK_REDIS_PORT": 16379, "LAKEFS_DELTA_STACK_SPARK_MASTER_PORT": 17077,
         "LAKEFS_DELTA_STACK_SPARK_MASTER_UI_PORT": 17080, "LAKEFS_DELTA_STACK_SPARK_WORKER_UI_PORT": 17081,
         "LAKEFS_DELTA_TEST_SERVICE_PORT": 18080, "LAKEFS_DELTA_DEMO_PORT": 18080}
SHIFT = 5_000
SERVICES_ABOVE = 100  # the tests' services take ports up to this far above LAKEFS_DELTA_TEST_SERVICE_PORT


def ephemeral_ports() -> range:
    """The ports the kernel gives connections' own ends."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def stack_of_process(number: int, environ: dict[str, str]) -> dict[str, str]:
    """The variables that give test process `number` its own stack (none for process 0)."""
    if number == 0:
        return {}
    first = environ.get("LAKEFS_DELTA_STACK_DIR") or str(
        Path(environ.get("LAKEFS_DELTA_CACHE", Path.home() / ".cache" / "lakefs-delta-exporter")) / "stack")
    ports = {name: int(environ.get(name, default)) + SHIFT * number for name, default in PORTS.items()}
    ephemeral = ephemeral_ports()
    if max(ports.values()) + SERVICES_ABOVE >= ephemeral.start:
        raise ValueError(f"test process {number}'s ports would reach {max(ports.values()) + SERVICES_ABOVE}, among "
                         f"the kernel's ephemeral ports ({ephemeral.start}-{ephemeral.stop - 1}), which any "
                         "connection may hold: run fewer test processes (LAKEFS_DELTA_TEST_PROCESSES)")
    return {"LAKEFS_DELTA_STACK_DIR": f"{first.rstrip('/')}-{number}", **{name: str(port) for name, port in ports.items()}}


if __name__ == "__main__":
    for name, value in stack_of_process(int(sys.argv[1]), dict(os.environ)).items():
        print(f"export {name}={shlex.quote(value)}")
