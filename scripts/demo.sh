#!/usr/bin/env bash
# The demo: sets everything up (scripts/setup.sh ran via `make demo`) and runs the story end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m devtools.demo
