#!/bin/bash
# One device call's measurements in order, each step under `timeout` so the whole fits the
# call's 600 s (575 here, the rest for the results' return): the Vulkan tests with the kit's
# library, llama.cpp's Vulkan tools (prebuilt: pack.sh --prebuilt), geist --fast, then the
# study's roles and batch over var/roles.args and var/batch.args (session 26). From the
# checkout root there: bash .dev-gpu/call.sh
t0=$SECONDS
step() {  # LIMIT CMD...: run CMD for at most LIMIT s and never past the call's 575 s
    local lim=$1 left
    shift
    left=$((575 - (SECONDS - t0)))
    if [ "$left" -lt 30 ]; then echo "== skipped (out of time): $*"; return; fi
    [ "$lim" -gt "$left" ] && lim=$left
    echo "== $(date -u +%T) $* (at most $lim s)"
    timeout -k 5 "$lim" "$@"
    echo "== exit $? at $((SECONDS - t0)) s"
}
KIT=$(dirname "$0")
uptime
step 120 bash "$KIT/device.sh" study tests
step 130 bash "$KIT/device.sh" bench --fresh --only llama
step 80 bash "$KIT/device.sh" bench --only geist --fast
cp /opt/gpukit/results.json "${OUT:?no OUT}/results-after-bench.json" 2>/dev/null
step 150 bash "$KIT/device.sh" study roles
step 100 bash "$KIT/device.sh" study batch
uptime
