"""The rooms of native/src depend downward only, and the library's symbols stay in its namespace.

Reads the release build's objects (build/release/obj/src/<room>/...): a room is the first folder
under native/src. Every symbol an object leaves undefined must be defined in its own room, in a
room ALLOWED below it, or outside the library (libc, libm, pthread). Only api/ defines geist_*
functions and only api/ calls them (DESIGN.md, "Rooms"). Build first: `scons variant=release`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OBJ = ROOT / "build" / "release" / "obj" / "src"
SRC = ROOT / "native" / "src"
STATIC = ROOT / "build" / "release" / "libgeist_static.a"
SHARED = ROOT / "build" / "release" / "libgeist.so"

# DESIGN.md's order, util <- gguf <- model <- tokenizer <- chat/grammar <- backend <- session <-
# sample <- gen <- runtime <- api, with sample on util alone, backend on util/gguf/model only and
# grammar (beside chat) on util/gguf/model/tokenizer.
_BELOW_SESSION = {"util", "gguf", "model", "tokenizer", "chat", "grammar", "backend"}
ALLOWED: dict[str, set[str]] = {
    "util": set(),
    "gguf": {"util"},
    "model": {"util", "gguf"},
    "tokenizer": {"util", "gguf", "model"},
    "chat": {"util", "gguf", "model", "tokenizer"},
    "grammar": {"util", "gguf", "model", "tokenizer"},
    "backend": {"util", "gguf", "model"},
    "session": set(_BELOW_SESSION),
    "sample": {"util"},
    "gen": _BELOW_SESSION | {"session", "sample"},
    "runtime": _BELOW_SESSION | {"session", "sample", "gen"},
    "api": _BELOW_SESSION | {"session", "sample", "gen", "runtime"},
}


def _nm(*args: str) -> list[str]:
    out = subprocess.run(["nm", *args], check=True, capture_output=True, text=True).stdout
    # an archive's listing has "member.os:" headers and blank lines between members
    return [ln.split()[-1] for ln in out.splitlines() if ln.strip() and not ln.endswith(":")]


def _objects() -> list[tuple[str, Path]]:
    """(room, object) for each object of a source that still exists (moved files leave stale
    objects behind in build/)."""
    found = []
    for obj in sorted(list(OBJ.rglob("*.os")) + list(OBJ.rglob("*.o"))):
        rel = obj.relative_to(OBJ)
        if not (SRC / rel.with_suffix(".c")).exists():
            continue
        found.append((rel.parts[0], obj))
    return found


def find_violations(
    defined: dict[str, str],
    undefined: dict[str, tuple[str, list[str]]],
    allowed: dict[str, set[str]],
) -> list[str]:
    """defined: symbol -> defining room; undefined: object -> (its room, symbols it references).
    Returns one line per (object, symbol, defining room) that breaks the rules."""
    bad = []
    for sym, room in sorted(defined.items()):
        if sym.startswith("geist_") and room != "api":
            bad.append(f"{room}/ defines {sym}: only api/ defines geist_* functions")
    for obj, (room, syms) in sorted(undefined.items()):
        if room not in allowed:
            bad.append(f"{obj}: room {room}/ is not in ALLOWED (place it in DESIGN.md's order)")
            continue
        for sym in sorted(syms):
            owner = defined.get(sym)
            if sym.startswith("geist_") and room != "api":
                bad.append(f"{obj} -> {sym} (defined in {owner or 'nowhere'}/): only api/ may "
                           "call geist_* functions")
            elif owner is not None and owner != room and owner not in allowed[room]:
                uses = ", ".join(f"{r}/" for r in sorted(allowed[room]))
                bad.append(f"{obj} -> {sym} (defined in {owner}/): {room}/ may use "
                           + (f"only {uses}" if uses else "no other room"))
    return bad


def _tables() -> tuple[dict[str, str], dict[str, tuple[str, list[str]]]]:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    objs = _objects()
    if not objs:
        pytest.skip(f"no objects under {OBJ}: build first (scons variant=release)")
    defined: dict[str, str] = {}
    undefined: dict[str, tuple[str, list[str]]] = {}
    for room, obj in objs:
        for sym in _nm("-g", "--defined-only", str(obj)):
            defined[sym] = room
        undefined[str(obj.relative_to(OBJ))] = (room, _nm("-u", str(obj)))
    return defined, undefined


def test_rooms_depend_downward_only() -> None:
    defined, undefined = _tables()
    bad = find_violations(defined, undefined, ALLOWED)
    assert not bad, "layering violations:\n  " + "\n  ".join(bad)


def test_checker_reports_planted_violations() -> None:
    """The checker itself, on a made-up symbol table with one violation of each kind."""
    defined = {
        "gt_fail": "util",
        "gt_session_new": "session",
        "gt_kv_write": "session",
        "geist_tokenize": "api",
        "geist_oops": "model",
    }
    undefined = {
        "util/util.os": ("util", ["gt_session_new", "memcpy"]),  # upward call
        "session/session.os": ("session", ["geist_tokenize", "gt_fail", "gt_kv_write"]),
        "api/api_text.os": ("api", ["gt_session_new", "geist_oops", "strlen"]),  # fine
        "newroom/x.os": ("newroom", ["gt_fail"]),
    }
    bad = find_violations(defined, undefined, ALLOWED)
    assert bad == [
        "model/ defines geist_oops: only api/ defines geist_* functions",
        "newroom/x.os: room newroom/ is not in ALLOWED (place it in DESIGN.md's order)",
        "session/session.os -> geist_tokenize (defined in api/): only api/ may call geist_* "
        "functions",
        "util/util.os -> gt_session_new (defined in session/): util/ may use no other room",
    ], bad


def test_static_library_symbols_are_prefixed() -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    if not STATIC.exists():
        pytest.skip(f"{STATIC} is missing: build first (scons variant=release)")
    syms = _nm("-g", "--defined-only", str(STATIC))
    bad = sorted({s for s in syms if not s.startswith(("geist_", "gt_"))})
    assert syms and not bad, f"globals without geist_/gt_ (they collide with ggml etc.): {bad}"


def test_shared_library_exports_only_the_api() -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    if not SHARED.exists():
        pytest.skip(f"{SHARED} is missing: build first (scons variant=release)")
    syms = _nm("-D", "--defined-only", str(SHARED))
    bad = sorted({s for s in syms if not s.startswith("geist_")})
    assert syms and not bad, f"exports besides geist_*: {bad}"
