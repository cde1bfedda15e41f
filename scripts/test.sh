#!/usr/bin/env bash
# The whole test suite: unit tests beside integration tests against real stacks (started here if not running).
# Fails on an import against the layering contracts, or when the integration suite collected
# nothing or skipped anything.
#
# The integration tests run in LAKEFS_DELTA_TEST_PROCESSES processes (default 3; pytest-xdist, a
# module at a time, the next module to whichever process is free; with three, the last one runs the
# modules that mostly wait first, `WAITING_MODULES` in tests/conftest.py), each against a stack of its
# own (`devtools/parallel.py`): process 0 the usual one, process N one on ports 5,000 x N higher,
# started here and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p tests/artifacts

# The tests' JVMs (Spark sessions, row diff jobs, the standalone cluster) are short-lived: compiled
# by the client compiler alone, with the serial collector, a small Spark job took 55 s of CPU where
# it took 85 s (the suite is CPU-bound on two cores). The client compiler alone gets a 48 MiB code
# cache by default: a test process's Spark session fills it, and the JVM then spends its time
# flushing compiled code and compiling it again (the code cache sweeper thread took 91 s of a
# session's 595 s of CPU); with 256 MiB two modules' session JVM took 197 s of CPU where it took
# 269 s. Only the tests run so: a deployment's row diff jobs keep the JVM's and Spark's defaults.
#
# Spark's own settings for the tests, as Java system properties (a SparkConf reads `spark.*` ones):
# most of the tests' queries read tens to hundreds of rows, and generating and compiling Java for each
# query (whole-stage code generation, Janino, then the JIT) cost more than running it. Interpreted,
# two modules' session JVM took 160 s of CPU where it took 197 s. Properties rather than a
# SPARK_CONF_DIR: a directory of files on the class path would rule out the class archive below.
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m -Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
# The classes a session loads, archived once (`devtools.spark.class_archive`, about a minute, made
# while the stacks start) and mapped by every session and row diff job JVM: 4 row diff tests with
# Spark jobs took 153 s of the machine's CPU with it, 183-185 s without. A JVM that cannot map it
# starts as before; so do the tests when it cannot be made (said here).
archive_log=$(mktemp)
.venv/bin/python -m devtools.spark class-archive >"$archive_log" 2>&1 &
archive_maker=$!
# Spark's scratch folders (an application's copies of its jars, 659 MiB with spark.jars; its shuffle
# files) under one folder removed at the end: a JVM the tests kill leaves its own behind, and four a
# run of them (2.6 GiB) had filled this machine's disk over two days.
export SPARK_LOCAL_DIRS
SPARK_LOCAL_DIRS=$(mktemp -d "${TMPDIR:-/tmp}/lakefs-delta-spark.XXXXXX")
processes=${LAKEFS_DELTA_TEST_PROCESSES:-3}
stacks_down() {
  for ((n = 1; n < processes; n++)); do
    (eval "$(.venv/bin/python -m devtools.parallel "$n")" && .venv/bin/python -m devtools.stack down >/dev/null 2>&1) || true
  done
}
# The unit tests (they need no stack) run beside everything else, in one process: while the stacks
# start, then beside the integration tests, whose processes leave a core idle in their waits (the
# integration phase's CPU was 92 % busy, and the unit tests took 42-63 s before it in two processes).
# Their output goes to a file, printed when they end.
stacks_log=$(mktemp)
unit_log=$(mktemp)
stacks_up() {
  .venv/bin/python -m devtools.stack up >/dev/null
  for ((n = 1; n < processes; n++)); do
    (eval "$(.venv/bin/python -m devtools.parallel "$n")" && .venv/bin/python -m devtools.stack up >/dev/null)
  done
}
unit_tests() {  # after the layering check (contracts in pyproject.toml): a wrong-way import fails the run
  local started=$SECONDS status=0
  .venv/bin/lint-imports --no-logo >"$unit_log" 2>&1 || status=$?
  .venv/bin/pytest -m unit -q -p no:cacheprovider --junitxml=tests/artifacts/unit.xml "$@" >>"$unit_log" 2>&1 || status=$?
  printf '\n[test] layering check and unit tests (%s s, beside the rest): %s %s\n' "$((SECONDS - started))" \
    "$(grep '^Contracts: ' "$unit_log")" "$(tail -1 "$unit_log")"
  return "$status"
}
stacks_up >"$stacks_log" 2>&1 &
stacks_maker=$!
unit_tests "$@" &
unit_runner=$!
trap 'wait "$stacks_maker" "$unit_runner" 2>/dev/null; stacks_down
      rm -rf "$SPARK_LOCAL_DIRS" "$archive_log" "$stacks_log" "$unit_log"' EXIT
phase_started=$SECONDS
wait "$stacks_maker" || { echo "[test] the stacks did not start: $(tail -c 3000 "$stacks_log")" >&2; exit 1; }
eval "$(.venv/bin/python -m devtools.stack env)"
if wait "$archive_maker"; then
  export JAVA_TOOL_OPTIONS="$JAVA_TOOL_OPTIONS $(tail -1 "$archive_log")"  # -XX:SharedArchiveFile=...
else
  echo "class archive: not made, the tests' JVMs start without it: $(tail -c 1500 "$archive_log")" >&2
fi
echo "[test] stacks and class archive ready in $((SECONDS - phase_started)) s"
phase_started=$SECONDS
parallel=()
((processes > 1)) && parallel=(-n "$processes" --dist loadfile --no-loadscope-reorder)  # modules in collection order: the slowest first (tests/conftest.py)
integration_status=0
.venv/bin/pytest -m integration -v "${parallel[@]}" --durations=30 --junitxml=tests/artifacts/integration.xml "$@" \
  || integration_status=$?
echo "[test] integration tests: $((SECONDS - phase_started)) s"
unit_status=0
wait "$unit_runner" || unit_status=$?
if ((unit_status != 0)); then
  echo "[test] the unit tests failed:" >&2
  cat "$unit_log" >&2
  exit "$unit_status"
fi
((integration_status == 0)) || exit "$integration_status"
.venv/bin/python scripts/check_junit.py tests/artifacts/unit.xml tests/artifacts/integration.xml
