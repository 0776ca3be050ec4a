"""cffi binding over native/include/geist.h (ABI mode: the header is parsed at import).

The library is looked up, in order: an explicit `load_library(path)` call made before first use,
the copy installed next to this package (`geist/_native/libgeist.so`, put there by SCons), and
the repository's `build/release/` folder.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import cffi

from geist.errors import GeistError, error_for_status

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent.parent

ffi = cffi.FFI()
_lock = threading.RLock()  # reentrant: a finalizer may call in while the library is opened
_lib: Any = None
_lib_path: Path | None = None


def _header_path() -> Path:
    for cand in (_HERE / "_native" / "geist.h", _REPO / "native" / "include" / "geist.h"):
        if cand.is_file():
            return cand
    raise GeistError("geist.h not found: build the native core first (scons)")


def _cdef_from_header(text: str) -> str:
    """Turns the public header into declarations cffi can parse: the part between the ABI version
    and the closing `extern "C"`, without preprocessor lines (simple integer #defines kept)."""
    body = text.split("#define GEIST_ABI_VERSION", 1)[1].split("\n", 1)[1]
    body = body.rsplit("#ifdef __cplusplus", 1)[0]
    out: list[str] = []
    for line in body.splitlines():
        s = line.strip()
        if s.startswith("#"):
            m = re.match(r"#define\s+(GEIST_\w+)\s+(\d+)u?\b", s)
            if m:
                out.append(f"#define {m.group(1)} {m.group(2)}")
            continue
        out.append(line.replace("GEIST_API ", ""))
    return re.sub(r"__attribute__\s*\(\(.*?\)\)", "", "\n".join(out))


# the library's file name on this system (a platform wheel holds that platform's build)
_LIB_NAME = "geist.dll" if os.name == "nt" else "libgeist.so"


def _candidates() -> list[Path]:
    return [
        _HERE / "_native" / _LIB_NAME,
        _REPO / "build" / "release" / _LIB_NAME,
    ]


def load_library(path: str | Path | None = None) -> Any:
    """Opens the native library (once). Pass `path` to pick a build (e.g. the ASan one)."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            if path is not None and Path(path).resolve() != _lib_path:
                raise GeistError(f"libgeist already loaded from {_lib_path}")
            return _lib
        cands = [Path(path)] if path is not None else _candidates()
        for cand in cands:
            if cand.is_file():
                opened = ffi.dlopen(str(cand))
                # Resolve every name now: cffi resolves one lazily under the ffi's lock, which is
                # not reentrant, so a finalizer (Model.__del__ -> geist_model_free) run by the
                # garbage collector while another thread or this one parses a C type under that
                # lock would wait on it forever (seen with pycparser 3).
                for name in dir(opened):
                    getattr(opened, name)
                _lib = opened
                _lib_path = cand.resolve()
                return _lib
        raise GeistError(
            "libgeist.so not found (looked in: " + ", ".join(str(c) for c in cands) + "); "
            "build it with `scons` in the repository"
        )


# Declarations are read at import (cheap), so ffi.new() works before the library is opened.
ffi.cdef(_cdef_from_header(_header_path().read_text()))


# Status codes and other constants, read from the header's enums (never written as literals).
def _enum(name: str) -> dict[str, int]:
    return dict(ffi.typeof(name).relements)


_STATUS = _enum("geist_status")
OK: int = _STATUS["GEIST_OK"]
ERR_INVALID_ARGUMENT: int = _STATUS["GEIST_ERR_INVALID_ARGUMENT"]
ERR_STATE: int = _STATUS["GEIST_ERR_STATE"]
ERR_BUFFER_TOO_SMALL: int = _STATUS["GEIST_ERR_BUFFER_TOO_SMALL"]
_EVENTS = _enum("geist_event_type")
EVENT_TOKEN: int = _EVENTS["GEIST_EVENT_TOKEN"]
EVENT_FINISHED: int = _EVENTS["GEIST_EVENT_FINISHED"]
EVENT_FAILED: int = _EVENTS["GEIST_EVENT_FAILED"]
EVENT_ACTION: int = _EVENTS["GEIST_EVENT_ACTION"]
# GEIST_DEVICE_PROFILE's roles by name ("qkv", "attention", ...), in the header's order
DEVICE_ROLES: dict[str, int] = {
    k.removeprefix("GEIST_ROLE_").lower(): v for k, v in _enum("geist_device_role").items()
    if k != "GEIST_DEVICE_ROLES"
}
FINISH_REASONS: dict[int, str] = {
    v: k.removeprefix("GEIST_FINISH_").lower() for k, v in _enum("geist_finish_reason").items()
}


def library_path() -> Path | None:
    return _lib_path


class _LazyLib:
    """`lib.geist_x(...)` opens the library on first use."""

    def __getattr__(self, name: str) -> Any:
        return getattr(load_library(), name)


lib: Any = _LazyLib()


def last_error() -> str:
    buf = ffi.new("char[]", 1024)
    lib.geist_last_error(buf, len(buf))
    return str(ffi.string(buf).decode("utf-8", "replace"))


def check(status: int, context: str = "") -> None:
    """Raises the GeistError subclass for a non-zero status, with this thread's native message."""
    if status != 0:
        msg = last_error()
        if context:
            msg = f"{context}: {msg}" if msg else context
        raise error_for_status(int(status), msg)
