#!/usr/bin/env bash
# Builds llama.cpp's own benchmark tools (llama-bench, llama-batched-bench) from the
# llama-cpp-python 0.3.36 sdist on PyPI, for the canonical CPU comparison
# (tests/bench/bench_llama_tools.py). About 2-3 minutes on 2 cores; cached. Usage:
#   nice -n 19 tests/bench/install_llama_tools.sh [DIR]     (default ~/.cache/geist/llama-tools)
set -euo pipefail
V="${1:-$HOME/.cache/geist/llama-tools}"
if [ -x "$V/build/bin/llama-bench" ] && [ -x "$V/build/bin/llama-batched-bench" ]; then
    echo "$V/build/bin"; exit 0
fi
command -v cmake >/dev/null || apt-get install -y -qq cmake >/dev/null
mkdir -p "$V"
[ -x "$V/venv/bin/pip" ] || python3 -m venv "$V/venv"
if [ ! -d "$V/llama_cpp_python-0.3.36" ]; then
    "$V/venv/bin/pip" download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$V/dl"
    tar xzf "$V/dl/llama_cpp_python-0.3.36.tar.gz" -C "$V"
fi
P="$V/llama_cpp_python-0.3.36/vendor/llama.cpp"
cmake -S "$P" -B "$V/build" -DGGML_NATIVE=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF >/dev/null
cmake --build "$V/build" --target llama-bench llama-batched-bench -j"${JOBS:-2}" >/dev/null
echo "$V/build/bin"
