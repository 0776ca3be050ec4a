#!/usr/bin/env bash
# A long fuzzing campaign: scripts/fuzz_campaign.sh SECONDS_PER_TARGET [PARALLEL_TARGETS] [TARGET...]
# Runs at nice 19 and keeps its corpus between campaigns in build/fuzz/campaign/corpus/<target>
# (merge what it finds worth keeping into tests/fuzz/corpus/ by hand; crashes land in
# build/fuzz/campaign/crash-<target>-*: minimize one with
# `build/fuzz/fuzz_<target> -minimize_crash=1 -max_total_time=60 CRASH`, commit it under
# tests/fuzz/regressions/<target>/ and fix the bug).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:?usage: scripts/fuzz_campaign.sh SECONDS_PER_TARGET [PARALLEL_TARGETS] [TARGET...]}
JOBS=${2:-1}
shift $(( $# >= 2 ? 2 : 1 ))
exec nice -n 19 scripts/fuzz.sh -t "$SECS" -j "$JOBS" -o build/fuzz/campaign "$@"
