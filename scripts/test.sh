#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: ruff, the C unit tests under ASan+UBSan with
# leak detection, the Python suite against the release build, and the quick Python suite against
# the ASan+UBSan build. Extra arguments go to the main pytest run (e.g. -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
PY=.venv/bin/python

echo "== ruff" >&2
$PY -m ruff check python tests

echo "== native build: release, asan and tsan" >&2
$PY -m SCons -Q -j2 variant=release,asan,tsan >/dev/null

echo "== C unit tests (ASan+UBSan, leak detection on)" >&2
SMOL=$($PY -c "from geist import models; print(models.smollm2_path())")
GEMMA=$($PY -c "from geist import models; print(models.gemma3_path())")
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
for t in build/asan/tests/test_*; do
    [ -x "$t" ] || continue
    echo "-- $t" >&2
    case "$(basename "$t")" in
        test_model_load) "$t" "$SMOL" && "$t" "$GEMMA" ;;  # needs real models
        test_actions) "$t" "$SMOL" ;;  # NPC actions on the real SmolLM2
        test_oom_walk) "$t" tests/fuzz/corpus/gguf/llama_q8.gguf tests/fuzz/corpus/gguf/gemma3_q8.gguf "$SMOL" ;;
        *) "$t" ;;
    esac
done
unset ASAN_OPTIONS UBSAN_OPTIONS

echo "== fuzz targets (libFuzzer + ASan + UBSan, 30 s each; regressions replayed first)" >&2
SCONS_JOBS=2 scripts/fuzz.sh -t 30

echo "== Python tests against the ASan+UBSan build (quick subset)" >&2
# The Vulkan forward tests run in the release pass only: under the preloaded sanitizers their
# shaders (executed inside lavapipe, not geist code) took 7.6 minutes; the Vulkan host side
# (device choice, import/upload, refusals: tests/core/test_vulkan.py) stays in this pass. The
# Metal plan's run on lavapipe (test_metal_step_vk.py: a release executable, its shaders inside
# lavapipe) runs in the release pass only too.
scripts/pytest_asan.sh -q -m "not slow" -p no:cacheprovider \
    --ignore=tests/core/test_vulkan_forward.py --ignore=tests/core/test_metal_step_vk.py

echo "== other platforms: clang build, windows-x86_64 (wine64), linux-arm64 (qemu), wheels" >&2
scripts/test_platforms.sh
scripts/test_wheels.sh

echo "== Python tests (release build, all)" >&2
$PY -m pytest -q -rs --durations=25 "$@"
