#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: ruff, the C unit tests under ASan+UBSan with
# leak detection, the Python suite against the release build, and the quick Python suite against
# the ASan+UBSan build. Extra arguments go to the release pytest runs (e.g. -m "not slow").
# Two cores: the fuzz targets run two at a time, and the ASan+UBSan pytest pass runs in the
# background beside the other platforms, the wheels and the release pass (the suite's engines
# default to one worker thread on 2 cores, cpu count - 1, so one pytest pass after the other
# left a core idle for most of their ~28 minutes); its output comes after the release pass's.
# The Godot tests (a frame-time bound among them) run last, alone.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== $* [$(date -u +%H:%M:%S), ${SECONDS} s in]" >&2; }  # the log shows each part's time

scripts/setup.sh
PY=.venv/bin/python

step "ruff"
$PY -m ruff check python tests

step "native build: release, asan and tsan; the in-kernel clock build (its bits are tested)"
$PY -m SCons -Q -j2 variant=release,asan,tsan >/dev/null
$PY -m SCons -Q -j2 gpu_clock=1 build/gpuclock-release/libgeist.so >/dev/null

step "C unit tests (ASan+UBSan, leak detection on)"
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

step "fuzz targets (libFuzzer + ASan + UBSan, 30 s each, two at a time; regressions replayed first)"
SCONS_JOBS=2 scripts/fuzz.sh -t 30 -j 2

step "Python tests against the ASan+UBSan build (quick subset), in the background: build/ci/pytest_asan.log"
# The Vulkan forward tests run in the release pass only: under the preloaded sanitizers their
# shaders (executed inside lavapipe, not geist code) took 7.6 minutes; the Vulkan host side
# (device choice, import/upload, refusals: tests/core/test_vulkan.py) stays in this pass. The
# Metal plan's run on lavapipe (test_metal_step_vk.py: a release executable, its shaders inside
# lavapipe) runs in the release pass only too. So do the tests that never call the library this
# pass loads, whose runs here repeated the release pass's exactly: tests/repo (nm over the release
# objects, file and workflow checks, a clang parse), test_msl.py (spirv-cross on the release
# build's shaders) and test_runtime_stress.py (it runs the release, asan and tsan executables
# itself, without the preloaded runtimes). The Godot tests skip themselves here (release only).
# numpy's OpenBLAS on one thread in both overlapping passes: its threads spin while they wait, and
# on a busy machine (load ~5) the float64 reference of test_reference.py[smollm2] took 117 s with
# its default two threads, 19 s with one (load ~2.5; 11.5 s with two on a quiet one), 2026-12-01
export OPENBLAS_NUM_THREADS=1
mkdir -p build/ci
ASAN_LOG=build/ci/pytest_asan.log
scripts/pytest_asan.sh -q -m "not slow" -p no:cacheprovider \
    --ignore=tests/core/test_vulkan_forward.py --ignore=tests/core/test_metal_step_vk.py \
    --ignore=tests/repo --ignore=tests/core/test_msl.py \
    --ignore=tests/runtime/test_runtime_stress.py >"$ASAN_LOG" 2>&1 &
ASAN_PID=$!
trap 'kill "$ASAN_PID" 2>/dev/null || true' EXIT

step "other platforms: clang build, windows-x86_64 (wine64), linux-arm64 (qemu), wheels"
scripts/test_platforms.sh
scripts/test_wheels.sh

step "Python tests (release build, all but tests/godot)"
release_rc=0
$PY -m pytest -q -rs --durations=25 --ignore=tests/godot "$@" || release_rc=$?

asan_rc=0
wait "$ASAN_PID" || asan_rc=$?
trap - EXIT
step "Python tests against the ASan+UBSan build (quick subset; ran beside the above: its time is the last line)"
cat "$ASAN_LOG"

# after the ASan pass, on a quiet machine: test_ai_bench holds the Godot main thread's p99 frame
# time under 20 ms, which other work on the machine pushed past it (20.01 ms at load ~5, 2026-12-01)
unset OPENBLAS_NUM_THREADS
step "Python tests (release build): tests/godot, alone"
godot_rc=0
$PY -m pytest -q -rs --durations=10 tests/godot "$@" || godot_rc=$?
[ "$asan_rc" = 0 ] || echo "FAIL: the ASan+UBSan pytest pass (exit $asan_rc)" >&2
[ "$release_rc" = 0 ] || echo "FAIL: the release pytest pass (exit $release_rc)" >&2
[ "$godot_rc" = 0 ] || echo "FAIL: the Godot tests (exit $godot_rc)" >&2
[ "$asan_rc" = 0 ] && [ "$release_rc" = 0 ] && [ "$godot_rc" = 0 ]
