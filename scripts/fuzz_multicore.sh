#!/usr/bin/env bash
# A long fuzz campaign on a many-core machine: every target at once, each with libFuzzer's
# -jobs/-workers (N processes sharing one corpus), from the committed seeds, with the fixture
# models (no real model needed, so the binaries can be carried to a machine without clang).
#   scripts/fuzz_multicore.sh [SECONDS]        (jobs per target: NG NR NT NP NS NM, see below)
# BIN: the fuzz binaries (default build/fuzz, from `scons variant=fuzz`); WORK: where corpora,
# logs and crashes go (default build/fuzz/multicore). Prints executions per target (the sum over
# its jobs), the last coverage line and the artifacts (crash-*, slow-unit-*) found.
# TOKENIZERS: the tokenize target's two models (default the fixtures; a campaign against the
# real tokenizers passes "--model=SMOLLM2.gguf --model2=GEMMA3.gguf": the real files, or the GPU
# kit's same-tokenizer stand-ins, tests/bench/gpu/standin.py).
# Session 6 ran this on a 16-core H200 host (binaries built here, stripped, carried there).
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD; B=${BIN:-$R/build/fuzz}; Z=${WORK:-$R/build/fuzz/multicore}
C=$R/tests/fuzz/corpus; F=$C/gguf
M1=--model=$F/llama_q8.gguf; M2=--model2=$F/gemma3_q8.gguf
T=${1:-480}
run() {
    local t=$1 n=$2; shift 2
    [ "$n" -gt 0 ] || return 0
    local d=$Z/w/$t dict=
    mkdir -p "$d/c" "$Z/a"
    [ -f "$R/tests/fuzz/$t.dict" ] && dict=-dict=$R/tests/fuzz/$t.dict
    (cd "$d" && "$B/fuzz_$t" "$@" $dict -jobs="$n" -workers="$n" -max_total_time="$T" \
        -print_final_stats=1 -artifact_prefix="$Z/a/$t-" "$d/c" "$C/$t" >"$d/main.log" 2>&1) &
}
run gguf "${NG:-5}"
run grammar "${NR:-3}" "$M1"
# shellcheck disable=SC2086  # two flags in one variable
run tokenize "${NT:-2}" ${TOKENIZERS:-"$M1" "$M2"}
run template "${NP:-2}" "$M1"
run snapshot "${NS:-2}" "--model=$F/gemma3_q8.gguf"
run sampler "${NM:-2}"
wait
for t in gguf grammar tokenize template snapshot sampler; do
    [ -d "$Z/w/$t" ] || continue
    ex=$(cat "$Z/w/$t"/fuzz-*.log 2>/dev/null | grep -h "stat::number_of_executed_units" | awk '{s+=$2} END {print s}')
    cov=$(grep -h " cov: " "$Z/w/$t"/fuzz-*.log 2>/dev/null | tail -1 | grep -o "cov: [0-9]*\|ft: [0-9]*" | tr '\n' ' ')
    echo "[fuzz] $t execs=${ex:-0} $cov artifacts=$(ls "$Z/a/$t"-* 2>/dev/null | wc -l)"
done
