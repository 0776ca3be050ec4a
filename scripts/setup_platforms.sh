#!/usr/bin/env bash
# Installs the cross toolchains from Debian's archive (clang, mingw-w64, wine64, aarch64 gcc,
# qemu-user-static) and builds every binary this machine can build: the core with clang
# (build/clang-release), the core, C tests and geist_runner for windows-x86_64 and linux-arm64
# (build/<target>-release), and, where Godot is installed (scripts/setup_godot.sh), the
# GDExtension of each (addons/geist/bin/libgeist_godot.<platform>.<so|dll>). Idempotent: a second
# run installs nothing and rebuilds only what changed. Without apt (not root, no sudo), what is
# missing is skipped with a warning. Run by scripts/setup.sh; scripts/test_platforms.sh tests it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PKGS="clang gcc-mingw-w64-x86-64 wine64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    echo "[platforms] installing from Debian:$missing" >&2
    # shellcheck disable=SC2086
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null; then
        $SUDO apt-get update -q >/dev/null || true
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null ||
            echo "[platforms] WARNING: could not install:$missing (their platforms are skipped)" >&2
    fi
fi
GODOT_BIN="$HOME/.cache/geist/godot/godot"
GD=()
[ -x "$GODOT_BIN" ] && GD=(godot=1 "godot_bin=$GODOT_BIN")
if command -v clang >/dev/null; then
    echo "[platforms] core with clang (build/clang-release)" >&2
    $PY -m SCons -Q -j2 variant=release cc=clang >/dev/null
fi
for t in windows-x86_64:x86_64-w64-mingw32-gcc linux-arm64:aarch64-linux-gnu-gcc; do
    if command -v "${t#*:}" >/dev/null; then
        echo "[platforms] ${t%%:*}: core, C tests, geist_runner${GD:+, GDExtension}" >&2
        $PY -m SCons -Q -j2 variant=release "target=${t%%:*}" "${GD[@]}" >/dev/null
    else
        echo "[platforms] WARNING: ${t#*:} missing: ${t%%:*} not built" >&2
    fi
done
