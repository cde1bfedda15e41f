#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine; safe to re-run (each step is skipped when done).
# Each phase prints its time. lakeFS, its ACL server and MinIO are built from their Go modules in the
# background from the start: they need only Go (and devtools/stack.py, standard library only), so the
# builds overlap the Debian packages and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[setup] %s\n' "$*" >&2; }
started=$SECONDS
phase_started=$SECONDS
done_with() { say "$1: $((SECONDS - phase_started)) s (setup so far: $((SECONDS - started)) s)"; phase_started=$SECONDS; }

for tool in python3.11 go java; do
  command -v "$tool" >/dev/null || { say "ERROR: $tool is required (Python 3.11, Go >= 1.26, Java 17)"; exit 1; }
done

python3.11 -m devtools.stack build >/dev/null &  # its progress goes to stderr, prefixed [stack]
builds=$!

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)  # the diff page's browser test (driven by Playwright)
command -v strace >/dev/null || missing+=(strace)  # a test holds Redis's fsync as a busy disk would
command -v cc >/dev/null || missing+=(gcc)  # builds exporter/iceberg/_blake2b.c at the install
python3.11 -c 'import os, sysconfig; os.stat(sysconfig.get_paths()["include"] + "/Python.h")' 2>/dev/null ||
  missing+=(python3.11-dev)  # ... with Python's headers
if (( ${#missing[@]} )); then
  say "installing Debian packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
done_with "Debian packages"

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3.11 -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml exporter/iceberg/*.c | sha256sum | cut -c1-16)  # the C is built at install
if [[ ! -e $stamp ]]; then
  say "installing Python dependencies (uv; its cache: ~/.cache/uv; its output: .venv/pip.log)"
  # uv installs from PyPI as pip would, in about a third of pip's time (a fresh .venv: 34-36 s where pip
  # took 96-98 s, most of CI's set-up); its build notes go to the log, not the screen; on a failure its end
  # is shown. A package PyPI has only as a source distribution (pyspark) is built once and its wheel kept
  # in our own wheelhouse: uv's cache revalidates the source distribution at each fresh .venv and built
  # it again (20 s of a 36 s install, and 0.5-1.4 GB more of ~/.cache/uv each time)
  wheels=${LAKEFS_DELTA_CACHE:-$HOME/.cache/lakefs-delta-exporter}/wheels
  mkdir -p "$wheels"
  installing=$(mktemp)
  if ! { .venv/bin/pip install -q uv && UV_LINK_MODE=${UV_LINK_MODE:-hardlink} \
           .venv/bin/uv pip install --python .venv/bin/python --find-links "$wheels" -e ".[spark,test,bench]"; } >.venv/pip.log 2>&1; then
    tail -n 40 .venv/pip.log >&2
    rm -f "$installing"
    say "ERROR: installing the Python dependencies failed (the whole output: .venv/pip.log)"
    exit 1
  fi
  find "$(.venv/bin/uv cache dir)" -path '*/sdists-v*/pypi/*' -name '*.whl' -newer "$installing" \
       -exec sh -c 'for w; do ln -f "$w" "$0/" 2>/dev/null || cp -f "$w" "$0/"; done' "$wheels" {} +
  rm -f "$installing"
  touch "$stamp"
fi
done_with "Python dependencies"

# Delta's and S3A's jars, resolved by Ivy once into ~/.cache/lakefs-delta-exporter/ivy and recorded
# there: every Spark JVM of the stack (sessions, row diff jobs) starts with the jars, not the packages
say "resolving the Spark jars (first time only: a download)"
.venv/bin/python -m devtools.spark >&2 || { say "ERROR: resolving the Spark jars failed (above)"; exit 1; }
done_with "Spark jars"

say "waiting for the lakeFS, ACL server and MinIO builds (first time only: several minutes)"
wait "$builds" || { say "ERROR: building lakeFS or MinIO failed (see the [stack] lines above)"; exit 1; }
done_with "Go builds, after the rest"
say "ready in $((SECONDS - started)) s"
