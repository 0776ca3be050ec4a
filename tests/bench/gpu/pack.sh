#!/usr/bin/env bash
# Assembles the GPU benchmark kit (tests/bench/gpu/README.md): everything a fresh NVIDIA H200
# device machine needs, in one folder of the repository that git ignores, so that a device call
# carries it (`carry: [".dev-gpu"]`). Run on the development machine, from any directory:
#
#   tests/bench/gpu/pack.sh [--repo CHECKOUT] [--prebuilt DIR] [DEST]
#
# CHECKOUT (default: the checkout holding this script) gives the geist that is measured: its
# build/release/libgeist.so, python/geist and .venv; DEST defaults to CHECKOUT/.dev-gpu.
# DIR holds llama.cpp's tools built on an earlier device machine (`device.sh save`'s
# llama-*-bin.tgz.part-* files): the kit carries them and the device skips the builds.
#
# DEST gets: debs-bookworm/ (Debian 12 libvulkan1, vulkaninfo, the X client libraries the NVIDIA
# ICD needs: for geist), debs-sid/ (Debian sid's glslc + libshaderc1, libvulkan-dev + libvulkan1
# 1.4.363, spirv-headers: for llama.cpp's Vulkan build), wheels/ (cffi, pycparser, gguf for
# CPython 3.12), llama.cpp.tar.gz (llama-cpp-python 0.3.36's llama.cpp, trimmed to what builds
# the two tools), python/geist (this checkout's package with build/release/libgeist.so and
# geist.h in _native/), models/ (the real files' headers + tensor tables: standin.py makes the
# stand-ins there), var/gpuclock.so (the in-kernel clock build, where it is built),
# var/pipestats with var/mvfast_sg.spv (a pipeline's register counts, where it builds) and this
# folder's scripts. Downloads are cached in ~/.cache/geist/gpukit.
# Needs: this checkout built (scons variant=release, Vulkan shaders included), .venv, network.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PREBUILT=
while [ $# -gt 0 ]; do
    case "$1" in
        --repo) REPO=$(cd "$2" && pwd); shift 2 ;;
        --prebuilt) PREBUILT=$(cd "$2" && pwd); shift 2 ;;
        *) break ;;
    esac
done
DEST=${1:-$REPO/.dev-gpu}
CACHE=$HOME/.cache/geist/gpukit
PY=$REPO/.venv/bin/python
LIMIT=$((64 * 1024 * 1024))
mkdir -p "$DEST" "$CACHE"
DEST=$(cd "$DEST" && pwd)

# --- the geist build: it must be there and have the Vulkan backend
LIB=$REPO/build/release/libgeist.so
[ -f "$LIB" ] || { echo "pack.sh: $LIB missing: build first (scons variant=release)" >&2; exit 2; }
if ! PYTHONPATH=$REPO/python "$PY" -c \
    "import geist, sys; sys.exit('vulkan' not in geist.backends_available())"; then
    echo "pack.sh: $LIB has no Vulkan backend (glslc and Vulkan headers missing at build?)" >&2
    exit 2
fi

# --- Debian packages, each suite through a private apt state (the system's is not touched)
URI=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
      || echo http://deb.debian.org/debian)
BOOKWORM="libvulkan1 vulkan-tools libx11-6 libx11-xcb1 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0
          libegl1 libglvnd0 libwayland-client0"
SID="glslc libshaderc1 libvulkan-dev libvulkan1 spirv-headers"
fetch_debs() {  # suite, dest folder, packages...
    local suite=$1 out=$2; shift 2
    local st=$CACHE/apt-$suite
    mkdir -p "$st/lists/partial" "$st/cache/archives/partial" "$out"
    echo "deb $URI $suite main" > "$st/sources.list"
    local o=(-oDir::State::Lists="$st/lists" -oDir::Etc::SourceList="$st/sources.list"
             -oDir::Etc::SourceParts=/nonexistent -oDir::Cache="$st/cache"
             -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -qq)
    # one update a day is enough
    if [ -z "$(find "$st/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
        apt-get "${o[@]}" update
    fi
    rm -f "$out"/*.deb
    (cd "$out" && apt-get "${o[@]}" download "$@")
    local f  # plain names (an epoch's ':' is saved as %3a): they travel as they are
    for f in "$out"/*.deb; do
        local n; n=$(basename "$f" | sed 's/[^A-Za-z0-9._-]/_/g')
        [ "$(basename "$f")" = "$n" ] || mv "$f" "$out/$n"
    done
}
fetch_debs bookworm "$DEST/debs-bookworm" $BOOKWORM
fetch_debs sid "$DEST/debs-sid" $SID

# --- wheels for the device's CPython 3.12 (numpy is there already)
mkdir -p "$DEST/wheels"
rm -f "$DEST/wheels"/*.whl
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEST/wheels" \
    "cffi==$(ver cffi)" "pycparser==$(ver pycparser)" "gguf==$(ver gguf)"

# --- llama.cpp from the llama-cpp-python 0.3.36 sdist, trimmed (models, docs, tests, ... out)
SDIST=$CACHE/llama_cpp_python-0.3.36.tar.gz
OLD=$HOME/.cache/geist/llama-tools/dl/llama_cpp_python-0.3.36.tar.gz  # install_llama_tools.sh's
[ -f "$SDIST" ] || [ ! -f "$OLD" ] || cp "$OLD" "$SDIST"
if [ ! -f "$SDIST" ]; then
    "$PY" -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$CACHE"
fi
if [ ! -f "$CACHE/llama.cpp.tar.gz" ] || [ "$SDIST" -nt "$CACHE/llama.cpp.tar.gz" ]; then
    T=$(mktemp -d)
    tar xzf "$SDIST" -C "$T" llama_cpp_python-0.3.36/vendor/llama.cpp
    L=$T/llama_cpp_python-0.3.36/vendor/llama.cpp
    rm -rf "$L"/{models,docs,tests,media,benches,examples,gguf-py,tools/ui}
    tar czf "$CACHE/llama.cpp.tar.gz" -C "$L/.." llama.cpp
    rm -rf "$T"
fi
cp "$CACHE/llama.cpp.tar.gz" "$DEST/llama.cpp.tar.gz"

# --- geist: the Python package with the native library beside it
rm -rf "$DEST/python"
mkdir -p "$DEST/python"
cp -r "$REPO/python/geist" "$DEST/python/geist"
find "$DEST/python" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$DEST/python/geist/_native"
cp "$LIB" "$DEST/python/geist/_native/libgeist.so"
cp "$REPO/native/include/geist.h" "$DEST/python/geist/_native/geist.h"

# --- the in-kernel clock build (scons gpu_clock=1), if built: clock.py runs it there
CLOCK_LIB=$REPO/build/gpuclock-release/libgeist.so
mkdir -p "$DEST/var"
rm -f "$DEST/var/gpuclock.so"
if [ -f "$CLOCK_LIB" ]; then
    strip --strip-unneeded -o "$DEST/var/gpuclock.so" "$CLOCK_LIB"
else
    echo "pack.sh: no $CLOCK_LIB (scons gpu_clock=1): the kit has no clock build"
fi

# --- pipestats.c (the drivers' register counts of a pipeline, README "Next (after session
# 31)") and the fast products' SPIR-V it reads, where a compiler and the Vulkan headers are here
rm -f "$DEST/var/pipestats" "$DEST/var/mvfast_sg.spv"
if cc -std=c17 -O2 -o "$DEST/var/pipestats" "$HERE/pipestats.c" -ldl 2>/dev/null; then
    cp "$REPO/build/release/shaders/vulkan_only/mvfast_sg.spv" "$DEST/var/" 2>/dev/null || true
else
    echo "pack.sh: pipestats.c did not build here (cc, vulkan/vulkan.h): the kit has no pipestats"
fi

# --- the models' headers and tensor tables (the stand-ins are made on the device)
mkdir -p "$DEST/models"
for name in smollm2 gemma3; do
    real=$(PYTHONPATH=$REPO/python "$PY" -c "from geist import models; print(models.get('$name'))")
    if [ ! -f "$DEST/models/$name.json" ] || [ "$real" -nt "$DEST/models/$name.json" ]; then
        nice "$PY" "$HERE/standin.py" header "$real" "$DEST/models/$name"
    fi
done

# --- llama.cpp's tools built on an earlier device machine, if given
rm -rf "$DEST/prebuilt"
if [ -n "$PREBUILT" ]; then
    mkdir -p "$DEST/prebuilt"
    cp "$PREBUILT"/llama-*-bin.tgz.part-* "$DEST/prebuilt/"
fi

# --- the scripts, and what this kit was made from
cp "$HERE/device.sh" "$HERE/call.sh" "$HERE/bench.py" "$HERE/standin.py" "$HERE/ab.py" "$HERE/reply.py" "$HERE/prefill.py" "$HERE/roles.py" \
    "$HERE/clock.py" \
    "$HERE/README.md" \
    "$DEST/"
{
    echo "packed: $(date -u +%FT%TZ) on $(hostname)"
    echo "geist: $(git -C "$REPO" rev-parse HEAD)$(git -C "$REPO" diff --quiet HEAD -- native python || echo ' (+ local changes)')"
    echo "libgeist.so: $(sha256sum "$LIB" | cut -c1-16) $(date -u -r "$LIB" +%FT%TZ)"
    [ ! -f "$CLOCK_LIB" ] || echo "var/gpuclock.so: $(date -u -r "$CLOCK_LIB" +%FT%TZ)"
    for d in "$DEST"/debs-*/*.deb; do echo "deb: ${d#"$DEST"/}"; done
    for w in "$DEST"/wheels/*.whl; do echo "wheel: ${w#"$DEST"/}"; done
    [ -z "$PREBUILT" ] || echo "prebuilt llama.cpp tools: $(ls "$DEST/prebuilt" | tr '\n' ' ')"
} > "$DEST/MANIFEST.txt"

SIZE=$(du -sb "$DEST" | cut -f1)
TREE=$(git -C "$REPO" ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
echo "kit: $DEST, $((SIZE / 1024 / 1024)) MiB (+ the checkout's $((TREE / 1024 / 1024)) MiB travels)"
if [ $((SIZE + TREE)) -gt $LIMIT ]; then
    echo "pack.sh: over the 64 MiB a device call carries: split it over calls" >&2
    exit 1
fi
if git -C "$(dirname "$DEST")" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
        && ! git -C "$(dirname "$DEST")" check-ignore -q "$DEST"; then
    echo "note: $DEST is not ignored by git; add /$(basename "$DEST")/ to .git/info/exclude"
fi
