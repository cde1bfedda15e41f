#!/usr/bin/env bash
# The whole test suite: unit, then integration against a real stack (started here if not running).
# Fails on an import against the layering contracts, or when the integration suite collected
# nothing or skipped anything.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lint-imports --no-logo  # the layering check (contracts in pyproject.toml): a wrong-way import fails the run
mkdir -p tests/artifacts
.venv/bin/pytest -m unit -q --junitxml=tests/artifacts/unit.xml "$@"  # no stack: they need none

.venv/bin/python -m devtools.stack up >/dev/null
eval "$(.venv/bin/python -m devtools.stack env)"
.venv/bin/pytest -m integration -v --durations=30 --junitxml=tests/artifacts/integration.xml "$@"
.venv/bin/python scripts/check_junit.py tests/artifacts/unit.xml tests/artifacts/integration.xml
