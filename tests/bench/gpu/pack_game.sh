#!/usr/bin/env bash
# Packs Godot for the GPU device machine (tests/bench/gpu/README.md, "The demo's --ai-bench on the
# GPU"): the Godot 4 of scripts/setup_godot.sh's private sysroot with only what it loads (the
# binary, its dynamic loader and the libraries `ld.so --list` names), as godot.tar.xz in parts
# that fit a device call beside the kit, into DEST (default CHECKOUT/.dev-game, ignored by git):
#
#   tests/bench/gpu/pack_game.sh [--part-mib N] [DEST]     (N: a part's size, default 28)
#
# DEST gets godot.tar.xz.part-NN and godot.parts (each part's name and sha256, so that the device
# knows when it holds all of them). There `device.sh game-stash DIR` keeps a call's parts in
# /opt/gpukit (while the machine stays warm) and `device.sh game` unpacks them and runs the demo.
# Needs: scripts/setup_godot.sh's Godot (it installs it), xz.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PART_MIB=28
if [ "${1:-}" = --part-mib ]; then
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "pack_game.sh: --part-mib takes a whole number" >&2; exit 2; }
    PART_MIB=$2; shift 2
fi
DEST=${1:-$REPO/.dev-game}

WRAP=$("$REPO/scripts/setup_godot.sh" | tail -n 1)
S=$(dirname "$WRAP")/sysroot
LD=$S/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
LIBPATH=$S/usr/lib/x86_64-linux-gnu:$S/usr/lib/x86_64-linux-gnu/pulseaudio
[ -x "$LD" ] && [ -f "$S/usr/bin/godot" ] || { echo "pack_game.sh: no Godot sysroot at $S" >&2; exit 2; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/godot/lib"
cp "$S/usr/bin/godot" "$STAGE/godot/godot"
cp -L "$LD" "$STAGE/godot/ld-linux-x86-64.so.2"
# every library the binary loads, under the name it asks for (`ld.so --list`: "name => path")
"$LD" --library-path "$LIBPATH" --list "$S/usr/bin/godot" | awk '$2 == "=>" && $1 !~ /\// && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do cp -L "$path" "$STAGE/godot/lib/$name"; done
n=$(ls "$STAGE/godot/lib" | wc -l)
[ "$n" -gt 10 ] || { echo "pack_game.sh: only $n libraries found: ld.so --list failed?" >&2; exit 1; }
# the staged copy starts as the device will start it
"$STAGE/godot/ld-linux-x86-64.so.2" --library-path "$STAGE/godot/lib" "$STAGE/godot/godot" \
    --headless --version >/dev/null

mkdir -p "$DEST"
rm -f "$DEST"/godot.tar.xz.part-* "$DEST/godot.parts"
echo "pack_game.sh: compressing $(du -sm "$STAGE/godot" | cut -f1) MiB (xz -6, a few minutes)" >&2
tar -C "$STAGE" -cf - godot | xz -T0 -6 | split -b "${PART_MIB}M" -d - "$DEST/godot.tar.xz.part-"
(cd "$DEST" && sha256sum godot.tar.xz.part-* > godot.parts)
echo "pack_game.sh: $DEST: $(wc -l < "$DEST/godot.parts") parts, $(du -sm "$DEST" | cut -f1) MiB" \
     "(Godot $("$WRAP" --headless --version 2>/dev/null | tail -n 1), $n libraries)" >&2
