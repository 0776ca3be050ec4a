#!/usr/bin/env bash
# Runs pytest against build/asan/libgeist.so with the sanitizer runtimes preloaded into Python.
# Leak detection is off here because CPython itself keeps memory until exit; the C unit tests
# (build/asan/tests/) run with leak detection on.
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN_RT=$(gcc -print-file-name=libasan.so)
UBSAN_RT=$(gcc -print-file-name=libubsan.so)
export LD_PRELOAD="$ASAN_RT $UBSAN_RT"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
exec .venv/bin/python -m pytest --native=asan "$@"
