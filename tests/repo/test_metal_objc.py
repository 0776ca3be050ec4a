"""A syntax check of the Metal host layer (native/src/backend/metal/metal.m) on Linux.

metal.m is compiled only on Darwin and has NEVER been compiled against Apple's SDK in this
repository. This check parses it with clang as Objective-C with ARC and the core's warning flags
(-Wall -Wextra -Werror), against stand-in declarations of the few Foundation/Metal names it uses
(tests/data/objc_stubs, written here, not Apple's headers). It catches C and Objective-C mistakes
(types, ARC bridging, unused values, warnings); it cannot tell whether the real SDK accepts it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METAL_M = ROOT / "native" / "src" / "backend" / "metal" / "metal.m"
STUBS = ROOT / "tests" / "data" / "objc_stubs"
# SConstruct's COMMON flags that matter to a parse, plus what SConstruct adds for .m files
FLAGS = ["-std=c17", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-D_GNU_SOURCE",
         "-fobjc-arc", "-DGEIST_HAVE_METAL"]


def test_metal_m_says_it_was_never_compiled_here() -> None:
    head = METAL_M.read_text(encoding="utf-8")[:1500]
    assert "NEVER COMPILED OR RUN IN THIS REPOSITORY" in head


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")
def test_metal_m_parses_with_the_core_warnings() -> None:
    r = subprocess.run(
        ["clang", "-fsyntax-only", "-x", "objective-c", "-fobjc-runtime=macosx-11.0", "-fblocks",
         *FLAGS, "-isystem", str(STUBS), "-I", str(ROOT / "native" / "include"),
         "-I", str(ROOT / "native" / "src"), str(METAL_M)],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
