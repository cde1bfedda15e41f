#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine; safe to re-run (each step is skipped when done).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[setup] %s\n' "$*" >&2; }

for tool in python3.11 go java; do
  command -v "$tool" >/dev/null || { say "ERROR: $tool is required (Python 3.11, Go >= 1.26, Java 17)"; exit 1; }
done

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)  # the diff page's browser test (driven by Playwright)
if (( ${#missing[@]} )); then
  say "installing Debian packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3.11 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -e $stamp ]]; then
  say "installing Python dependencies (pip cache: ~/.cache/pip)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[spark,test,bench]"
  touch "$stamp"
fi

say "building lakeFS and MinIO if not cached (first time: ~10 minutes)"
.venv/bin/python -m devtools.stack build >/dev/null
say "ready"
