"""Engine, Model and Session: the Pythonic face of geist.h (token ids in and out)."""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from geist._binding import check, ffi, lib
from geist.errors import GeistError, StateError

KV_MODES: dict[str, int] = {"f32": 0, "f16": 1}

_MEMORY_FIELDS = (
    "weights_aliased",
    "weights_owned",
    "metadata",
    "tokenizer",
    "rope_tables",
    "kv_cache",
    "scratch",
    "other",
    "mapped_file",
)


def _report_to_dict(rep: Any) -> dict[str, int]:
    out = {name: int(getattr(rep, name)) for name in _MEMORY_FIELDS}
    out["total_owned"] = sum(v for k, v in out.items() if k not in ("weights_aliased", "mapped_file"))
    return out


def _read_text(fn: Any, *args: Any) -> str:
    """Calls a geist `(…, char *buf, size_t cap, size_t *needed)` function, growing the buffer."""
    needed = ffi.new("size_t *")
    cap = 4096
    while True:
        buf = ffi.new("char[]", cap)
        status = fn(*args, buf, cap, needed)
        if status == 8 and needed[0] > cap:  # GEIST_ERR_BUFFER_TOO_SMALL
            cap = int(needed[0])
            continue
        check(status)
        return str(ffi.string(buf).decode("utf-8", "replace"))


class Engine:
    """Chooses the backend; owns what its models share. Most code uses the default engine."""

    def __init__(self, backend: str | None = None, n_threads: int = 0) -> None:
        opts = ffi.new("geist_engine_options *")
        lib.geist_engine_options_default(opts)
        self._backend_name = ffi.new("char[]", (backend or "auto").encode())
        opts.backend = self._backend_name
        opts.n_threads = n_threads
        out = ffi.new("geist_engine **")
        check(lib.geist_engine_create(opts, out))
        self._ptr: Any = out[0]
        self._models: weakref.WeakSet[Model] = weakref.WeakSet()

    @property
    def backend(self) -> str:
        return str(ffi.string(lib.geist_engine_backend_name(self._ptr)).decode())

    def close(self) -> None:
        if self._ptr is not None:
            for m in list(self._models):
                m.close()
            lib.geist_engine_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_default_engines: dict[str | None, Engine] = {}
_default_lock = threading.Lock()


def default_engine(backend: str | None = None) -> Engine:
    with _default_lock:
        eng = _default_engines.get(backend)
        if eng is None:
            eng = Engine(backend)
            _default_engines[backend] = eng
        return eng


class Model:
    """A loaded GGUF model. Weights are used in place: from a file mapping (`load`) or from the
    caller's buffer (`from_buffer`, zero-copy; the model keeps a reference to the buffer)."""

    def __init__(self, ptr: Any, engine: Engine, keepalive: Any = None, path: str | None = None):
        self._ptr: Any = ptr
        self._engine = engine
        self._keepalive = keepalive  # the caller's buffer and its cffi view: bytes must outlive us
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self.path = path
        engine._models.add(self)
        self._info: dict[str, Any] | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, backend: str | None = None,
             engine: Engine | None = None) -> Model:
        eng = engine or default_engine(backend)
        out = ffi.new("geist_model **")
        check(lib.geist_model_load_file(eng._ptr, os.fsencode(path), ffi.NULL, out))
        return cls(out[0], eng, path=os.fspath(path))

    @classmethod
    def from_buffer(cls, buf: Any, *, backend: str | None = None,
                    engine: Engine | None = None) -> Model:
        """Zero-copy: the model reads `buf` (bytes, bytearray, mmap, numpy array, memoryview) in
        place and never writes it. Do not change the buffer while the model lives."""
        eng = engine or default_engine(backend)
        view = ffi.from_buffer(buf, require_writable=False)
        out = ffi.new("geist_model **")
        check(lib.geist_model_load_memory(eng._ptr, view, len(view), ffi.NULL, out))
        return cls(out[0], eng, keepalive=(buf, view))

    def _require(self) -> Any:
        if self._ptr is None:
            raise StateError("model is closed")
        return self._ptr

    @property
    def info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = json.loads(_read_text(lib.geist_model_info_json, self._require()))
        return dict(self._info)

    @property
    def n_vocab(self) -> int:
        return int(lib.geist_model_n_vocab(self._require()))

    @property
    def n_ctx_train(self) -> int:
        return int(lib.geist_model_n_ctx_train(self._require()))

    @property
    def backend(self) -> str:
        return self._engine.backend

    def meta(self, key: str) -> str:
        """A metadata value as text (arrays summarised)."""
        return _read_text(lib.geist_model_meta, self._require(), key.encode())

    def memory(self) -> dict[str, int]:
        """Resident bytes by category (see docs/MEMORY.md)."""
        rep = ffi.new("geist_memory_report *")
        check(lib.geist_model_memory(self._require(), rep))
        return _report_to_dict(rep)

    def session(self, max_seq_len: int = 512, kv_mode: str = "f16", seed: int = 0) -> Session:
        if kv_mode not in KV_MODES:
            raise GeistError(f"unknown kv_mode {kv_mode!r}; choose from {sorted(KV_MODES)}", 1)
        opts = ffi.new("geist_session_options *")
        lib.geist_session_options_default(opts)
        opts.max_seq_len = max_seq_len
        opts.kv_mode = KV_MODES[kv_mode]
        opts.seed = seed
        out = ffi.new("geist_session **")
        check(lib.geist_session_create(self._require(), opts, out))
        s = Session(out[0], self, kv_mode)
        self._sessions.add(s)
        return s

    def close(self) -> None:
        """Frees the model (and closes its sessions first)."""
        if self._ptr is not None:
            for s in list(self._sessions):
                s.close()
            lib.geist_model_free(self._ptr)
            self._ptr = None
            self._keepalive = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Session:
    """One conversation's state (KV cache sized from `max_seq_len`). Use from one thread at a
    time; different sessions may run on different threads at once."""

    def __init__(self, ptr: Any, model: Model, kv_mode: str) -> None:
        self._ptr: Any = ptr
        self.model = model
        self.kv_mode = kv_mode
        self._lock = threading.Lock()

    def _require(self) -> Any:
        if self._ptr is None:
            raise StateError("session is closed")
        return self._ptr

    @staticmethod
    def _ids(ids: Sequence[int] | np.ndarray) -> Any:
        arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        if arr.ndim != 1:
            raise GeistError("token ids must be a 1-D sequence", 1)
        if arr.size and (arr.min() < -(2**31) or arr.max() >= 2**31):
            raise GeistError("token id out of int32 range", 1)
        return np.ascontiguousarray(arr.astype(np.int32))

    @property
    def n_past(self) -> int:
        return int(lib.geist_session_n_past(self._require()))

    @property
    def max_seq_len(self) -> int:
        return int(lib.geist_session_max_seq_len(self._require()))

    def prefill(self, ids: Sequence[int] | np.ndarray) -> None:
        arr = self._ids(ids)
        with self._lock:
            check(lib.geist_session_prefill(self._require(), ffi.from_buffer("int32_t[]", arr),
                                            arr.size))

    def decode(self, token: int) -> None:
        with self._lock:
            check(lib.geist_session_decode(self._require(), int(token)))

    def step(self, token: int | None = None) -> int:
        """Feeds `token` (default: the greedy choice from the current logits) and returns it."""
        if token is None:
            token = int(np.argmax(self.logits()))
        self.decode(token)
        return token

    def logits(self) -> np.ndarray:
        """A copy of the logits after the last token (float32, n_vocab)."""
        out = ffi.new("const float **")
        with self._lock:
            check(lib.geist_session_logits(self._require(), out))
            n = self.model.n_vocab
            return np.frombuffer(ffi.buffer(out[0], n * 4), dtype=np.float32).copy()

    def eval(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Appends ids and returns logits for every position, shape (n, n_vocab) float32."""
        arr = self._ids(ids)
        res = np.empty((arr.size, self.model.n_vocab), dtype=np.float32)
        with self._lock:
            check(lib.geist_session_eval(self._require(), ffi.from_buffer("int32_t[]", arr),
                                         arr.size, ffi.from_buffer("float[]", res)))
        return res

    def reset(self) -> None:
        with self._lock:
            lib.geist_session_reset(self._require())

    def memory(self) -> dict[str, int]:
        rep = ffi.new("geist_memory_report *")
        check(lib.geist_session_memory(self._require(), rep))
        return _report_to_dict(rep)

    def close(self) -> None:
        with self._lock:
            if self._ptr is not None:
                lib.geist_session_free(self._ptr)
                self._ptr = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
