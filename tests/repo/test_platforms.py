"""Every platform's binaries: what geist.gdextension names exists after the build, and the Windows
DLLs export only geist_* (and the Godot entry symbol).

scripts/setup_platforms.sh (run by scripts/setup.sh) builds every binary this machine can build:
the core and the GDExtension for linux.x86_64, linux.arm64 (aarch64-linux-gnu-gcc) and
windows.x86_64 (x86_64-w64-mingw32-gcc). A platform whose cross compiler is not installed here is
skipped with the reason; in CI setup installs them all, so nothing is skipped there.
"""

from __future__ import annotations

import re
import shutil
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GDEXT = ROOT / "addons" / "geist" / "geist.gdextension"
GODOT = Path.home() / ".cache" / "geist" / "godot" / "godot"
# the compiler each Godot platform of geist.gdextension needs
COMPILERS = {"linux.x86_64": "gcc", "linux.arm64": "aarch64-linux-gnu-gcc",
             "windows.x86_64": "x86_64-w64-mingw32-gcc", "macos": "clang"}
# the system that builds each platform's binaries: Linux cross-builds the Linux and Windows ones
# (scripts/setup_platforms.sh); macOS builds its own (.github/workflows/macos.yml)
BUILT_ON = {"linux.x86_64": "linux", "linux.arm64": "linux", "windows.x86_64": "linux",
            "macos": "darwin"}
DLLS = {
    ROOT / "build" / "windows-x86_64-release" / "geist.dll": set(),
    ROOT / "addons" / "geist" / "bin" / "libgeist_godot.windows.x86_64.dll": {"geist_godot_init"},
}


def gdextension_libraries() -> dict[str, str]:
    """[libraries] of geist.gdextension: feature tag -> res:// path."""
    out: dict[str, str] = {}
    section = ""
    for line in GDEXT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[libraries]" and "=" in line:
            key, value = (p.strip() for p in line.split("=", 1))
            out[key] = value.strip('"')
    return out


def platform_of(tag: str) -> str:
    """'windows.release.x86_64' -> 'windows.x86_64'; 'macos.release' (universal) -> 'macos'"""
    parts = tag.split(".")
    return parts[0] if len(parts) == 2 else f"{parts[0]}.{parts[-1]}"


def pe_exports(path: Path) -> list[str]:
    """Names in a PE32+ file's export table."""
    data = path.read_bytes()
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    assert data[pe:pe + 4] == b"PE\0\0", f"{path} is not a PE file"
    (n_sections,) = struct.unpack_from("<H", data, pe + 6)
    (opt_size,) = struct.unpack_from("<H", data, pe + 20)
    opt = pe + 24
    assert struct.unpack_from("<H", data, opt)[0] == 0x20B, "not PE32+"
    exp_rva, exp_size = struct.unpack_from("<II", data, opt + 112)
    sections = [struct.unpack_from("<IIII", data, opt + opt_size + 40 * i + 8)
                for i in range(n_sections)]  # virtual size, address, raw size, raw pointer

    def off(rva: int) -> int:
        for vsize, va, rsize, ptr in sections:
            if va <= rva < va + max(vsize, rsize):
                return ptr + rva - va
        raise AssertionError(f"RVA {rva:#x} outside every section")

    if exp_rva == 0 or exp_size == 0:
        return []
    d = off(exp_rva)
    (n_names,) = struct.unpack_from("<I", data, d + 24)
    (names_rva,) = struct.unpack_from("<I", data, d + 32)
    names = []
    for i in range(n_names):
        p = off(struct.unpack_from("<I", data, off(names_rva) + 4 * i)[0])
        names.append(data[p:data.index(b"\0", p)].decode("ascii"))
    return names


def test_gdextension_names_the_shipped_platforms() -> None:
    plats = {platform_of(t) for t in gdextension_libraries()}
    assert {"linux.x86_64", "linux.arm64", "windows.x86_64", "macos"} <= plats


@pytest.mark.parametrize("tag", sorted(gdextension_libraries()))
def test_every_gdextension_binary_exists(tag: str) -> None:
    plat = platform_of(tag)
    if not GODOT.exists():
        pytest.skip("Godot 4 is not installed (scripts/setup_godot.sh): the addon is not built")
    host = BUILT_ON.get(plat)
    if host is not None and sys.platform != host:
        pytest.skip(f"{plat} binaries are built on {host}, not here ({sys.platform})")
    cc = COMPILERS.get(plat)
    assert cc is not None, f"{tag}: no known compiler for {plat}; add it to setup_platforms.sh"
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed here (scripts/setup_platforms.sh installs it)")
    res = gdextension_libraries()[tag]
    assert res.startswith("res://addons/geist/"), res
    path = ROOT / res.removeprefix("res://")
    assert path.is_file(), f"{tag}: {path} missing; run scripts/setup_platforms.sh"


@pytest.mark.parametrize("dll", sorted(DLLS), ids=lambda p: p.name)
def test_windows_dlls_export_only_geist(dll: Path) -> None:
    if shutil.which("x86_64-w64-mingw32-gcc") is None:
        pytest.skip("mingw-w64 is not installed here (scripts/setup_platforms.sh installs it)")
    if "godot" in dll.name and not GODOT.exists():
        pytest.skip("Godot 4 is not installed: the addon is not built")
    assert dll.is_file(), f"{dll} missing; run scripts/setup_platforms.sh"
    names = pe_exports(dll)
    assert any(n.startswith("geist_") for n in names), names
    stray = [n for n in names if not re.fullmatch(r"geist_\w+", n)]
    assert not stray, f"{dll.name} exports more than geist_*: {stray[:20]}"
    for extra in DLLS[dll]:
        assert extra in names, f"{dll.name} does not export {extra}"
