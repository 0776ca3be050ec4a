#!/usr/bin/env bash
# Tests the other platforms' builds of scripts/setup_platforms.sh on this x86-64 Linux machine:
#   the clang build (warning-free under -Werror, or it would not exist): the C unit tests;
#   windows-x86_64 under wine64: the C unit tests (the runtime stress test on SmolLM2, winpthreads),
#     and geist_runner on fixtures of every weight
#     type (llama and gemma3), one Q4_K fixture of each later architecture, and on SmolLM2 (8 reference prompts, 32 greedy tokens);
#   linux-arm64 under qemu-aarch64-static, once with -cpu max (dotprod, i8mm) and once with
#     -cpu cortex-a53 (plain NEON, the fallback): the C unit tests, geist_runner on the same
#     fixtures and on SmolLM2 (2 prompts, 16 tokens: emulation is slow).
# geist_runner compares greedy ids and a hash of every logits row with what this machine's
# cpu_scalar wrote (build/platforms/*.expected): cpu_neon, cpu_x86 and cpu_scalar bit for bit.
# A platform whose toolchain or emulator is missing is skipped with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=build/platforms
mkdir -p "$OUT"
SMOL=$($PY -c "from geist import models; print(models.smollm2_path())")
PROMPTS=tests/data/reference/prompts.txt
HOST_RUNNER=build/release/tools/geist_runner
[ -x "$HOST_RUNNER" ] || $PY -m SCons -Q -j2 variant=release >/dev/null
head -n 2 "$PROMPTS" >"$OUT/prompts2.txt"
printf 'The smith said\nOnce upon a time\n' >"$OUT/fixture_prompts.txt"

# the fixtures (geist.testing) and cpu_scalar's answers on this machine
FIXTURES=$($PY - <<'PYEOF'
from geist import testing
for arch in ("llama", "gemma3"):
    for t in ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"):
        print(testing.fixture_path(arch, t))
for family in ("llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2"):  # one each
    print(testing.family_fixture_path(family, "Q4_K"))
PYEOF
)
expect() { # model prompts tokens -> the expected file's path
    local f
    f="$OUT/$(basename "$1" .gguf).$(basename "$2" .txt).$3.expected"
    [ -s "$f" ] || "$HOST_RUNNER" -b cpu_scalar -n "$3" "$1" "$2" >"$f" 2>/dev/null
    echo "$f"
}
for m in $FIXTURES; do expect "$m" "$OUT/fixture_prompts.txt" 8 >/dev/null; done

# each emulated run's limit: a hang (a lost wake-up under emulation once held a run for good)
# fails its suite with the run's name instead of holding the whole CI
RUN_LIMIT=600
run_suite() { # label dir exe-suffix smol-prompts smol-tokens stress-tokens prefix...
    # runs the C tests and geist_runner through the prefix (wine64, qemu); stress-tokens: the
    # runtime stress test's tokens on SmolLM2 (0: without a model, it skips)
    local label=$1 dir=$2 exe=$3 smol_prompts=$4 smol_tokens=$5 stress=$6
    shift 6
    echo "-- $label: C unit tests" >&2
    for t in "$dir"/tests/test_*"$exe"; do
        case "$(basename "$t")" in
            test_model_load*) "$@" "$t" "$SMOL" >/dev/null ;;
            test_runtime_stress*) if [ "$stress" -gt 0 ]; then "$@" "$t" "$SMOL" "$stress" >/dev/null; fi ;;
            *) "$@" "$t" >/dev/null ;;
        esac || { echo "FAIL $label: $t" >&2; "$@" "$t" | tail -n 20 >&2; return 1; }
    done
    echo "-- $label: geist_runner on 22 fixtures" >&2
    for m in $FIXTURES; do
        "$@" "$dir/tools/geist_runner$exe" -n 8 -e "$(expect "$m" "$OUT/fixture_prompts.txt" 8)" \
            "$m" "$OUT/fixture_prompts.txt" >/dev/null 2>"$OUT/runner.log" ||
            { echo "FAIL $label: $m" >&2; cat "$OUT/runner.log" >&2; return 1; }
    done
    echo "-- $label: geist_runner on SmolLM2 ($(wc -l <"$smol_prompts") prompts, $smol_tokens tokens)" >&2
    "$@" "$dir/tools/geist_runner$exe" -t 2 -n "$smol_tokens" \
        -e "$(expect "$SMOL" "$smol_prompts" "$smol_tokens")" "$SMOL" "$smol_prompts" >/dev/null
}

fails=0
if [ -x build/clang-release/tests/test_gguf ]; then # built with -Werror by setup_platforms.sh
    echo "-- clang: C unit tests" >&2
    for t in build/clang-release/tests/test_*; do
        case "$(basename "$t")" in
            test_model_load) "$t" "$SMOL" >/dev/null ;;
            test_oom_walk) "$t" tests/fuzz/corpus/gguf/llama_q8.gguf \
                tests/fuzz/corpus/gguf/gemma3_q8.gguf "$SMOL" >/dev/null ;;
            *) "$t" >/dev/null ;;
        esac || { echo "FAIL clang: $t" >&2; fails=$((fails + 1)); }
    done
else
    echo "WARNING: clang build missing: not tested" >&2
fi
WINE=/usr/lib/wine/wine64
if [ -x "$WINE" ] && [ -x build/windows-x86_64-release/tests/test_gguf.exe ]; then
    export WINEPREFIX="$PWD/build/platforms/wine" WINEDEBUG=-all
    mkdir -p "$WINEPREFIX"
    # one persistent wineserver for the whole suite: by default it exits 3 s after its last
    # client, and a client starting as it exits fails ("recvmsg: Connection reset by peer",
    # seen once between two fixtures' runs)
    WINESERVER=/usr/lib/wine/wineserver64
    [ -x "$WINESERVER" ] && "$WINESERVER" -p
    "$WINE" wineboot -i >/dev/null 2>&1 || true
    run_suite "windows-x86_64 (wine64)" build/windows-x86_64-release .exe "$PROMPTS" 32 300 \
        timeout "$RUN_LIMIT" "$WINE" ||
        fails=$((fails + 1))
    if [ -x "$WINESERVER" ]; then "$WINESERVER" -k >/dev/null 2>&1 || true; fi
else
    echo "WARNING: wine64 or the windows-x86_64 build missing: Windows not tested" >&2
fi
if command -v qemu-aarch64-static >/dev/null && [ -x build/linux-arm64-release/tests/test_gguf ]; then
    for cpu in max cortex-a53; do
        run_suite "linux-arm64 (qemu -cpu $cpu)" build/linux-arm64-release "" "$OUT/prompts2.txt" 16 0 \
            timeout "$RUN_LIMIT" qemu-aarch64-static -cpu "$cpu" || fails=$((fails + 1))
    done
else
    echo "WARNING: qemu-aarch64-static or the linux-arm64 build missing: arm64 not tested" >&2
fi
[ "$fails" = 0 ] || { echo "platform tests: $fails suites failed" >&2; exit 1; }
echo "platform tests passed" >&2
