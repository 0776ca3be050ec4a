#!/usr/bin/env bash
# Builds the libFuzzer targets (scons variant=fuzz: clang, -fsanitize=fuzzer,address,undefined),
# replays the committed regression inputs (tests/fuzz/regressions/<target>/), then fuzzes each
# target for a bounded time from its committed seeds (tests/fuzz/corpus/<target>/).
#   scripts/fuzz.sh [-t SECONDS_PER_TARGET] [-j PARALLEL_TARGETS] [-o WORK_DIR] [TARGET...]
# Defaults: 30 s, one target at a time, WORK_DIR build/fuzz/run (new inputs found go to
# WORK_DIR/corpus/<target>, crashes to WORK_DIR/crash-<target>-*). Prints one line per target:
# executions, coverage (libFuzzer's cov/ft), exec/s, crashes. Exit status 1 on any crash.
# Without clang (a developer machine) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=30
JOBS=1
WORK=build/fuzz/run
while getopts "t:j:o:" opt; do
    case $opt in
        t) SECS=$OPTARG ;;
        j) JOBS=$OPTARG ;;
        o) WORK=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf template tokenize snapshot sampler grammar)
PY=.venv/bin/python
if ! command -v clang >/dev/null; then
    echo "[fuzz] clang not found: fuzz targets skipped (apt-get install clang libfuzzer-14-dev)" >&2
    exit 0
fi
$PY -m SCons -Q -j"${SCONS_JOBS:-1}" variant=fuzz >/dev/null
SMOL=$($PY -c "from geist import models; print(models.smollm2_path())")
GEMMA=$($PY -c "from geist import models; print(models.gemma3_path())")
mkdir -p "$WORK"

args_for() {
    case $1 in
        template) echo "--model=$SMOL" ;;
        tokenize) echo "--model=$SMOL --model2=$GEMMA" ;;
        grammar) echo "--model=$SMOL" ;;
        snapshot) echo "--model=tests/fuzz/corpus/gguf/gemma3_q8.gguf" ;;
        *) echo "" ;;
    esac
}

run_one() {
    local t=$1 bin=build/fuzz/fuzz_$1 log=$WORK/$1.log
    # shellcheck disable=SC2046
    local extra=$(args_for "$t")
    local dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    if [ -d "tests/fuzz/regressions/$t" ] && [ -n "$(ls -A "tests/fuzz/regressions/$t")" ]; then
        # shellcheck disable=SC2086
        if ! "$bin" $extra "tests/fuzz/regressions/$t"/* >"$WORK/$t.regressions.log" 2>&1; then
            echo "[fuzz] $t: a committed regression input fails (see $WORK/$t.regressions.log)" >&2
            return 1
        fi
    fi
    mkdir -p "$WORK/corpus/$t"
    local rc=0
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
        -artifact_prefix="$WORK/crash-$t-" "${dict[@]}" "$WORK/corpus/$t" "tests/fuzz/corpus/$t" \
        $extra >"$log" 2>&1 || rc=$?
    local execs cov ft eps crashes
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -n1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n1 | awk '{print $2}')
    eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{print $2}' | tail -n1)
    crashes=$(find "$WORK" -maxdepth 1 -name "crash-$t-*" | wc -l)
    printf '[fuzz] %-9s %4ss  execs %-10s cov %-6s ft %-7s exec/s %-7s crashes %s\n' \
        "$t" "$SECS" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${eps:-?}" "$crashes" >&2
    if [ $rc -ne 0 ]; then
        echo "[fuzz] $t FAILED (exit $rc); the tail of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
}

status=0
pids=()
for t in "${TARGETS[@]}"; do
    if [ "$JOBS" -le 1 ]; then
        run_one "$t" || status=1
    else
        run_one "$t" &
        pids+=($!)
        if [ ${#pids[@]} -ge "$JOBS" ]; then
            wait "${pids[0]}" || status=1
            pids=("${pids[@]:1}")
        fi
    fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
