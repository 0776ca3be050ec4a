#!/usr/bin/env bash
# Installs llama-cpp-python (only for benchmarking against llama.cpp) into its own venv.
# It compiles llama.cpp from source: ~15 minutes on 2 cores. Usage:
#   nice -n 19 tests/bench/install_llama_cpp.sh [VENV_DIR]
set -euo pipefail
VENV="${1:-$HOME/.cache/geist/llama-venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip >/dev/null
# Native build for this CPU (GGML_NATIVE), as a user of llama.cpp would run it.
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" CMAKE_ARGS="-DGGML_NATIVE=ON" \
    "$VENV/bin/python" -m pip install --no-cache-dir "llama-cpp-python==0.3.36"
"$VENV/bin/python" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"
