#!/usr/bin/env bash
# The GPU benchmark kit's device side (tests/bench/gpu/README.md), run on the NVIDIA H200 device
# machine from the kit folder that pack.sh assembled and a device call carried:
#
#   bash .dev-gpu/device.sh setup        unpack the libraries and tools, install the wheels,
#                                        unpack llama.cpp, make the model stand-ins (idempotent)
#   bash .dev-gpu/device.sh start        setup, then both llama.cpp builds in the background
#                                        (setsid: they outlive the call while the machine is warm)
#   bash .dev-gpu/device.sh wait [S]     wait up to S seconds (default 540) for both builds;
#                                        exit 0 once both finished (built or failed)
#   bash .dev-gpu/device.sh build vulkan|cuda   one build in the foreground
#   bash .dev-gpu/device.sh bench [ARGS] bench.py (ARGS: bench.py --help); results into $OUT
#   bash .dev-gpu/device.sh check        the device as Vulkan, CUDA and geist see it
#   bash .dev-gpu/device.sh all          setup, check, geist's bench (on the quiet machine), both
#                                        builds, then llama.cpp's bench if it still fits in 590 s
#   bash .dev-gpu/device.sh resume       the rest, in a second call if `all` ended "next: ...
#                                        resume": wait 540 s, llama.cpp's bench
#   bash .dev-gpu/device.sh save [DIR]   the built tools (bin/ of each build, stripped) as
#                                        llama-{vulkan,cuda}-bin.tgz.part-* (15 MiB parts) into
#                                        DIR (default $OUT): `pack.sh --prebuilt DIR` puts them
#                                        in a later kit, whose setup then skips the builds
#   bash .dev-gpu/device.sh study [PART ...]   geist only, the kit's library and var/'s (run from
#                                        the checkout root): PARTs in order, default all of
#                                        tests (the Vulkan tests on this GPU), clock (clock.py on
#                                        var/gpuclock.so), roles (roles.py: the kit's library and
#                                        var/stub-*.so, var/roles.args' lines), ab (ab.py
#                                        var/base.so -> the kit's, 2
#                                        rounds), batch (roles.py --npcs 8: 8 sessions' batched
#                                        passes by role, plain and profiled; the kit's library,
#                                        the stubs and roles.args', or var/batch.args' lines
#                                        alone); each into $OUT, a part that fails logged and
#                                        passed over; each part stopped by 585 s (timeout), one
#                                        that cannot start with 45 s left named; `study --budget S
#                                        [PART ...]` stops by S s instead (a call granted less)
#   bash .dev-gpu/device.sh game-stash DIR   keep the Godot parts (pack_game.sh's) a call carried
#                                        in DIR, over as many calls as they take
#   bash .dev-gpu/device.sh game [--npcs N] [--tokens T] [--threads K] [--model NAME] [--fast]
#                                        once every part is held: the demo's --ai-bench headless,
#                                        CPU backend then Vulkan (--fast: and Vulkan with
#                                        GEIST_DEVICE_FAST; carry addons/geist/bin too),
#                                        into $OUT/ai-bench-{cpu,vulkan}.json
#   --root DIR before the command puts /opt/... under DIR (a dry run of setup elsewhere)
#
# Everything lives in $W (/opt/gpukit) and two prefixes: Debian 12's libvulkan1 + X client
# libraries in /opt/vk (geist's loader and what the NVIDIA ICD needs to load), Debian sid's
# glslc/shaderc, Vulkan 1.4.363 loader + headers and SPIR-V headers in /opt/vksid (llama.cpp's
# Vulkan build); nothing is unpacked over /.
set -euo pipefail
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=
if [ "${1:-}" = --root ]; then ROOT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2; fi
W=$ROOT/opt/gpukit
VK=$ROOT/opt/vk
SID=$ROOT/opt/vksid
LIBDIR=usr/lib/x86_64-linux-gnu
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_RUNTIME_DIR=/tmp/gpukit-xdg
mkdir -p -m 700 "$XDG_RUNTIME_DIR"
# geist's own processes: Debian 12's loader (dlopen'd by libgeist) and the ICD's X libraries
GEIST_LD=$VK/$LIBDIR
# llama.cpp's Vulkan tools: sid's loader first (they were built against it), then the X libraries
LLAMA_VK_LD=$SID/$LIBDIR:$VK/$LIBDIR
export NCCL_NVLS_ENABLE=0   # the machine's rule: NVLink multicast stays off

log() { echo "[device.sh $(date -u +%T)] $*"; }

setup() {
    mkdir -p "$W/logs" "$W/models"
    if [ ! -f "$W/.unpacked" ]; then
        shopt -s nullglob  # a kit slimmed for a call (no sid tools: session 23) has fewer
        for d in "$KIT"/debs-bookworm/*.deb; do dpkg -x "$d" "$VK"; done
        for d in "$KIT"/debs-sid/*.deb; do dpkg -x "$d" "$SID"; done
        shopt -u nullglob
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$W/site" "$KIT"/wheels/*.whl
        rm -rf "$W/llama.cpp"
        tar xzf "$KIT/llama.cpp.tar.gz" -C "$W"
        touch "$W/.unpacked"
    fi
    local k
    for k in vulkan cuda; do  # tools built on an earlier machine (device.sh save)
        if [ ! -f "$W/build-$k.ok" ] && compgen -G "$KIT/prebuilt/llama-$k-bin.tgz.part-*" >/dev/null
        then
            mkdir -p "$W/build-$k"
            cat "$KIT/prebuilt/llama-$k-bin.tgz.part-"* | tar xzf - -C "$W/build-$k"
            echo prebuilt > "$W/build-$k.ok"
            log "build $k: prebuilt tools unpacked ($W/build-$k/bin)"
        fi
    done
    for meta in "$KIT"/models/*.json; do
        local name; name=$(basename "$meta" .json)
        if [ ! -f "$W/models/$name.gguf" ]; then
            python3 "$KIT/standin.py" make "$meta" "$W/models/$name.gguf"
            python3 "$KIT/standin.py" check "$meta" "$W/models/$name.gguf"
        fi
    done
    # the scripts and the models' headers kept beside the tools: a later call carries only its own
    # paths (the kit's folder is gone from its tree), so it runs $W/kit/device.sh
    if [ "$KIT" != "$W/kit" ]; then
        mkdir -p "$W/kit"
        cp "$KIT/device.sh" "$KIT/standin.py" "$W/kit/"
        rm -rf "$W/kit/models" && cp -r "$KIT/models" "$W/kit/models"
    fi
    log "setup done: $(ls "$W/models")"
}

build() {  # vulkan | cuda
    local kind=$1 B=$W/build-$1
    local common=(-S "$W/llama.cpp" -B "$B" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON
                  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF
                  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
    command -v ninja >/dev/null && common+=(-G Ninja)
    rm -f "$B.ok" "$B.failed"
    local t0=$SECONDS
    (
        set -e
        if [ "$kind" = vulkan ]; then
            export PATH=$SID/usr/bin:$PATH LD_LIBRARY_PATH=$LLAMA_VK_LD
            cmake "${common[@]}" -DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR="$SID/usr/include" \
                -DVulkan_LIBRARY="$SID/$LIBDIR/libvulkan.so" \
                -DVulkan_GLSLC_EXECUTABLE="$SID/usr/bin/glslc"
        elif [ "$kind" = cuda ]; then
            local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
            cmake "${common[@]}" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
                -DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_COMPILER="$nvcc"
        else
            echo "unknown build '$kind' (vulkan or cuda)"; exit 2
        fi
        cmake --build "$B" --target llama-bench llama-batched-bench -j"${JOBS:-16}"
    ) > "$W/logs/build-$kind.log" 2>&1 && ok=1 || ok=0
    if [ $ok = 1 ]; then
        echo "$((SECONDS - t0))" > "$B.ok"; log "build $kind: done in $((SECONDS - t0)) s"
    else
        echo "$((SECONDS - t0))" > "$B.failed"
        log "build $kind: FAILED after $((SECONDS - t0)) s; end of $W/logs/build-$kind.log:"
        tail -30 "$W/logs/build-$kind.log"
        return 1
    fi
}

start() {
    setup
    for k in vulkan cuda; do
        if [ -f "$W/build-$k.ok" ]; then log "build $k: already built"; continue; fi
        rm -f "$W/build-$k.failed"
        touch "$W/build-$k.running"
        setsid nohup bash -c "bash '$KIT/device.sh' ${ROOT:+--root '$ROOT'} build $k; rm -f '$W/build-$k.running'" \
            > "$W/logs/start-$k.log" 2>&1 < /dev/null &
        log "build $k: started in the background ($W/logs/build-$k.log)"
    done
}

wait_builds() {  # [seconds]
    local limit=${1:-540} t0=$SECONDS
    while [ -f "$W/build-vulkan.running" ] || [ -f "$W/build-cuda.running" ]; do
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            log "still building after ${limit} s:"
            for k in vulkan cuda; do
                [ -f "$W/build-$k.running" ] && echo "  $k: $(tail -1 "$W/logs/build-$k.log")"
            done
            return 3
        fi
        sleep 5
    done
    for k in vulkan cuda; do
        if [ -f "$W/build-$k.ok" ]; then log "build $k: built ($(cat "$W/build-$k.ok") s)" \
            | sed 's/(prebuilt s)/(prebuilt)/'
        elif [ -f "$W/build-$k.failed" ]; then
            log "build $k: FAILED"; tail -20 "$W/logs/build-$k.log" 2>/dev/null || true
        else log "build $k: not started (device.sh start)"; fi
    done
}

bench() {
    PYTHONUNBUFFERED=1 python3 "$KIT/bench.py" --kit "$KIT" --work "$W" \
        --geist-ld "$GEIST_LD" --llama-vulkan-ld "$LLAMA_VK_LD" "$@"
}

save() {  # [dir]
    local out=${1:-${OUT:?no OUT: give a folder}} k
    mkdir -p "$out"
    for k in vulkan cuda; do
        [ -f "$W/build-$k.ok" ] || { log "save: $k is not built"; continue; }
        local t; t=$(mktemp -d)
        cp -a "$W/build-$k/bin" "$t/bin"
        find "$t/bin" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} + \
            2>/dev/null || true
        tar czf - -C "$t" bin | split -b 15M -d - "$out/llama-$k-bin.tgz.part-"
        rm -rf "$t"
        log "save: $k -> $(ls "$out"/llama-$k-bin.tgz.part-* | wc -l) part(s), $(du -ch "$out"/llama-$k-bin.tgz.part-* | tail -1 | cut -f1)"
    done
}

check() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    LD_LIBRARY_PATH=$GEIST_LD "$VK/usr/bin/vulkaninfo" --summary 2>&1 | grep -E \
        "apiVersion|driverVersion|deviceName|deviceType" || echo "vulkaninfo: no device"
    LD_LIBRARY_PATH=$GEIST_LD PYTHONPATH=$KIT/python:$W/site python3 -c \
        "import geist; e = geist.Engine(backend='vulkan'); print('geist vulkan:', e.device); e.close()"
}

study() {  # [--budget S] [part ...]
    local budget=585
    if [ "${1:-}" = --budget ]; then
        [[ "${2:-}" =~ ^[0-9]+$ ]] || { log "study: --budget takes seconds (a whole number)"; return 2; }
        budget=$2; shift 2
    fi
    setup
    local out=${OUT:?no OUT} lib=$KIT/python/geist/_native/libgeist.so part
    # the tests' processes open libvulkan.so.1 by name: Debian 12's loader, made findable
    if [ -w /etc/ld.so.conf.d ]; then
        echo "$GEIST_LD" > /etc/ld.so.conf.d/zz-gpukit.conf && ldconfig || log "study: ldconfig failed"
    fi
    export PYTHONPATH=$KIT/python:$W/site PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$GEIST_LD
    export GEIST_TEST_VULKAN_ICD=$VK_DRIVER_FILES
    local parts=("$@") stubs=() left
    [ ${#parts[@]} -gt 0 ] || parts=(tests clock roles ab batch)
    shopt -s nullglob
    stubs=("$KIT"/var/stub-*.so)
    shopt -u nullglob
    # var/roles.args: more runs for roles, a line each: "@ARG,..." the kit's library with those
    # `geist bench` arguments, "NAME.so[@ARG,...]" var/NAME.so (roles.py's LIB@ARGS)
    args_of() {  # FILE: its lines as roles.py's LIB[@ARGS]
        local spec
        while read -r spec; do
            case "$spec" in
                '') ;;
                @*) echo "$lib$spec" ;;
                *) echo "$KIT/var/$spec" ;;
            esac
        done < "$1"
    }
    [ -f "$KIT/var/roles.args" ] && mapfile -t -O ${#stubs[@]} stubs < <(args_of "$KIT/var/roles.args")
    # var/batch.args (session 26): the batch part's list, where it differs from roles'
    local batch=("$lib" "${stubs[@]}")
    [ -f "$KIT/var/batch.args" ] && mapfile -t batch < <(args_of "$KIT/var/batch.args")
    for part in "${parts[@]}"; do
        left=$((budget - SECONDS))  # each part stops by then (default 585: the call's 600 s)
        if [ "$left" -lt 45 ]; then log "study: out of time before '$part'"; continue; fi
        log "study: $part (at most $left s)"
        case "$part" in
            tests) timeout -k 10 "$left" python3 -m pytest -q -m "not slow" -p no:cacheprovider \
                       --native="$lib" tests/core/test_vulkan_forward.py > "$out/tests.txt" 2>&1 \
                       || log "study: tests failed or stopped"
                   tail -15 "$out/tests.txt" ;;
            clock) if [ -f "$KIT/var/gpuclock.so" ]; then
                       # var/clock.args: clock.py's further arguments (--fast), a line
                       local cargs=()
                       [ -f "$KIT/var/clock.args" ] && read -ra cargs < "$KIT/var/clock.args"
                       timeout -k 10 "$left" python3 "$KIT/clock.py" "$out/clock.json" \
                           "$KIT/var/gpuclock.so" "${cargs[@]}" || log "study: clock failed or stopped"
                   else log "study: no var/gpuclock.so (pack.sh after scons gpu_clock=1)"; fi ;;
            roles) timeout -k 10 "$left" python3 "$KIT/roles.py" "$out/roles.json" "$lib" "${stubs[@]}" \
                       || log "study: roles failed or stopped" ;;
            ab) if [ -f "$KIT/var/base.so" ]; then
                    timeout -k 10 "$left" python3 "$KIT/ab.py" "$KIT/var/base.so" "$lib" \
                        "$out/ab.json" 2 || log "study: ab failed or stopped"
                else log "study: no var/base.so to compare with"; fi ;;
            batch) timeout -k 10 "$left" python3 "$KIT/roles.py" "$out/roles-npcs8.json" \
                       "${batch[@]}" --npcs 8 --tg 64 || log "study: batch failed or stopped" ;;
            *) log "study: unknown part '$part' (tests, clock, roles, ab, batch)" ;;
        esac
    done
    log "study: done in $SECONDS s"
}

# Godot's parts (pack_game.sh) from a carried folder into $W/game-parts: a call's 64 MiB holds
# the kit or part of Godot, so the parts come over calls while the machine stays warm
game_stash() {  # DIR
    local dir=${1:?"game-stash: name the carried folder (.dev-game)"}
    [ -f "$dir/godot.parts" ] || { log "game-stash: $dir has no godot.parts (pack_game.sh's)"; return 2; }
    mkdir -p "$W/game-parts"
    cp "$dir/godot.parts" "$W/game-parts/"
    shopt -s nullglob
    local f
    for f in "$dir"/godot.tar.xz.part-*; do cp "$f" "$W/game-parts/"; done
    shopt -u nullglob
    local held want
    read -r held want < <(game_parts_held)
    log "game-stash: $held of $want parts held"
}

# "HELD WANT": how many of godot.parts' parts $W/game-parts holds with their sha256
game_parts_held() {
    local held=0 want=0 sum name
    while read -r sum name; do
        want=$((want + 1))
        if [ -f "$W/game-parts/$name" ] &&
           [ "$(sha256sum < "$W/game-parts/$name" | cut -d' ' -f1)" = "$sum" ]; then
            held=$((held + 1))
        fi
    done < "$W/game-parts/godot.parts"
    echo "$held $want"
}

# Godot unpacked into $W/godot once every part is held (python's lzma: no xz needed there)
game_unpack() {
    [ -f "$W/godot/.ok" ] && return 0
    [ -f "$W/game-parts/godot.parts" ] || { log "game: no Godot parts held (game-stash DIR first)"; return 1; }
    local held want
    read -r held want < <(game_parts_held)
    if [ "$held" != "$want" ]; then
        log "game: $held of Godot's $want parts held (game-stash DIR with the rest)"; return 1
    fi
    rm -rf "$W/godot"
    cat "$W/game-parts"/godot.tar.xz.part-* | python3 -c \
        "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
        | tar xf - -C "$W"
    touch "$W/godot/.ok"
    log "game: Godot unpacked ($(du -sm "$W/godot" | cut -f1) MiB)"
}

# The demo's --ai-bench, headless, on the CPU backend and on Vulkan (this GPU), one after the
# other, from the checkout root (demo_project/, addons/geist/bin carried): $OUT/ai-bench-*.json
game() {  # [--npcs N] [--tokens T] [--threads K] [--model NAME] [--fast]
    local npcs=4 tokens=64 threads=4 model=smollm2 runs=(cpu vulkan)
    while [ $# -gt 0 ]; do
        case "$1" in
            --fast) runs+=(vulkan-fast); shift ;;
            --npcs) npcs=$2; shift 2 ;;
            --tokens) tokens=$2; shift 2 ;;
            --threads) threads=$2; shift 2 ;;
            --model) model=$2; shift 2 ;;
            *) log "game: unknown argument '$1'"; return 2 ;;
        esac
    done
    setup
    game_unpack || return 1
    [ -f addons/geist/bin/libgeist_godot.so ] || { log "game: addons/geist/bin not carried"; return 1; }
    # the demo's links to the addon, as scripts/setup.sh makes them (git ignores them)
    mkdir -p demo_project/addons demo_project/.godot
    [ -e demo_project/addons/geist ] || ln -s ../../addons/geist demo_project/addons/geist
    [ -f demo_project/.godot/extension_list.cfg ] ||
        echo "res://addons/geist/geist.gdextension" > demo_project/.godot/extension_list.cfg
    local out=${OUT:?no OUT} b rc
    "$W/godot/ld-linux-x86-64.so.2" --library-path "$W/godot/lib" "$W/godot/godot" --headless \
        --version
    for b in "${runs[@]}"; do
        local extra=()
        [ "$b" = vulkan ] && extra=(--backend vulkan)
        [ "$b" = vulkan-fast ] && extra=(--backend vulkan --fast)
        log "game: --ai-bench on $b ($npcs NPCs, $tokens tokens, $model; load $(cut -d' ' -f1 /proc/loadavg))"
        rc=0
        # Debian 12's Vulkan loader after Godot's libraries (geist dlopens libvulkan.so.1)
        timeout -k 10 240 "$W/godot/ld-linux-x86-64.so.2" --library-path "$W/godot/lib:$GEIST_LD" \
            "$W/godot/godot" --headless --path demo_project -- --ai-bench --npcs "$npcs" \
            --tokens "$tokens" --threads "$threads" --model "$W/models/$model.gguf" "${extra[@]}" \
            --json "$out/ai-bench-$b.json" > "$out/ai-bench-$b.log" 2>&1 || rc=$?
        log "game: $b rc $rc"
        tail -5 "$out/ai-bench-$b.log"
    done
    python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
for b in ("cpu", "vulkan", "vulkan-fast"):
    p = Path(sys.argv[1]) / f"ai-bench-{b}.json"
    if not p.exists():
        if b != "vulkan-fast":  # (run with --fast only)
            print(b, "no JSON")
        continue
    d = json.loads(p.read_text())
    print(b, d.get("device", ""), "decode t/s", d.get("decode_tokens_per_s"), "frame ms",
          d.get("frame_ms"))
PY
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    setup) setup ;;
    build) setup; build "$1" ;;
    start) start ;;
    wait) wait_builds "${1:-540}" ;;
    bench) bench "$@" ;;
    check) check ;;
    save) save "${1:-}" ;;
    study) study "$@" ;;
    game-stash) game_stash "$@" ;;
    game) game "$@" ;;
    all)  # sized for one call of 600 s: the llama.cpp part (about 2 minutes) only if it fits
        setup
        check || log "check failed: geist's part will report why; llama.cpp's part goes on"
        bench --only geist --fresh "$@"
        start
        left=$((590 - 150 - SECONDS))
        if wait_builds $((left > 0 ? left : 0)); then
            bench --only llama "$@"
        else
            log "next: bash .dev-gpu/device.sh resume (at once, while the machine is warm)"
            exit 3
        fi ;;
    resume)
        wait_builds 540
        bench --only llama "$@" ;;
    *) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"
       exit 2 ;;
esac
