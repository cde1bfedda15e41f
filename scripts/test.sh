#!/usr/bin/env bash
# The whole test suite: unit, then integration against real stacks (started here if not running).
# Fails on an import against the layering contracts, or when the integration suite collected
# nothing or skipped anything.
#
# The integration tests run in LAKEFS_DELTA_TEST_PROCESSES processes (default 2; pytest-xdist, a
# module at a time, the next module to whichever process is free), each against a stack of its own
# (`devtools/parallel.py`): process 0 the usual one, process N one on ports 10,000 x N higher,
# started here and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lint-imports --no-logo  # the layering check (contracts in pyproject.toml): a wrong-way import fails the run
mkdir -p tests/artifacts
.venv/bin/pytest -m unit -q -n 2 --junitxml=tests/artifacts/unit.xml "$@"  # no stack: they need none; two processes

# The tests' JVMs (Spark sessions, row diff jobs, the standalone cluster) are short-lived: compiled
# by the client compiler alone, with the serial collector, a small Spark job took 55 s of CPU where
# it took 85 s (the suite is CPU-bound on two cores). The client compiler alone gets a 48 MiB code
# cache by default: a test process's Spark session fills it, and the JVM then spends its time
# flushing compiled code and compiling it again (the code cache sweeper thread took 91 s of a
# session's 595 s of CPU); with 256 MiB two modules' session JVM took 197 s of CPU where it took
# 269 s. Spark's own settings for the tests: tests/spark-conf. Only the tests run so: a
# deployment's row diff jobs keep the JVM's and Spark's defaults.
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
export SPARK_CONF_DIR="$PWD/tests/spark-conf"
processes=${LAKEFS_DELTA_TEST_PROCESSES:-2}
stacks_down() {
  for ((n = 1; n < processes; n++)); do
    (eval "$(.venv/bin/python -m devtools.parallel "$n")" && .venv/bin/python -m devtools.stack down >/dev/null 2>&1) || true
  done
}
trap stacks_down EXIT
.venv/bin/python -m devtools.stack up >/dev/null
for ((n = 1; n < processes; n++)); do
  (eval "$(.venv/bin/python -m devtools.parallel "$n")" && .venv/bin/python -m devtools.stack up >/dev/null)
done
eval "$(.venv/bin/python -m devtools.stack env)"
parallel=()
((processes > 1)) && parallel=(-n "$processes" --dist loadfile --no-loadscope-reorder)  # modules in collection order: the slowest first (tests/conftest.py)
.venv/bin/pytest -m integration -v "${parallel[@]}" --durations=30 --junitxml=tests/artifacts/integration.xml "$@"
.venv/bin/python scripts/check_junit.py tests/artifacts/unit.xml tests/artifacts/integration.xml
