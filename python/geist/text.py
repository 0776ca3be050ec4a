"""The streaming detokenizer as a Python object: ids in, complete UTF-8 text out."""

from __future__ import annotations

from typing import Any

from geist._binding import ERR_BUFFER_TOO_SMALL, check, ffi, lib


class StreamDetokenizer:
    """Ids in, complete UTF-8 text out (never a broken character)."""

    def __init__(self, model_ptr: Any, render_special: bool = False) -> None:
        out = ffi.new("geist_detokenizer **")
        check(lib.geist_detokenizer_create(model_ptr, 1 if render_special else 0, out))
        self._ptr: Any = ffi.gc(out[0], lib.geist_detokenizer_free)
        self._cap = 256
        self._buf = ffi.new("char[]", self._cap)
        self._len = ffi.new("size_t *")

    def _call(self, fn: Any, *args: Any) -> str:
        while True:
            st = fn(self._ptr, *args, self._buf, self._cap, self._len)
            if st == ERR_BUFFER_TOO_SMALL:  # grow and retry (nothing was consumed)
                self._cap = max(self._cap * 2, int(self._len[0]))
                self._buf = ffi.new("char[]", self._cap)
                continue
            check(st)
            return bytes(ffi.buffer(self._buf, self._len[0])).decode("utf-8")

    def push(self, token: int) -> str:
        return self._call(lib.geist_detokenizer_push, token)

    def flush(self) -> str:
        return self._call(lib.geist_detokenizer_flush)
