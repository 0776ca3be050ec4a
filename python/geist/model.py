"""Engine, Model and Session: the Pythonic face of geist.h (token ids in and out)."""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from geist._binding import DEVICE_ROLES, ERR_BUFFER_TOO_SMALL, OK, check, ffi, lib
from geist.errors import GeistError, StateError
from geist.generate import ContextPolicy, GenerationResult, Piece
from geist.sampling import SamplerOptions

KV_MODES: dict[str, int] = {"f32": 0, "f16": 1, "int8": 2, "int4": 3, "kivi2": 4}
_KV_NAMES = {v: k for k, v in KV_MODES.items()}

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
    "shared_prefix",
    "device_local",
    "imported",
    "staging",
)


def _report_to_dict(rep: Any) -> dict[str, int]:
    out = {name: int(getattr(rep, name)) for name in _MEMORY_FIELDS}
    not_owned = ("weights_aliased", "mapped_file", "shared_prefix", "imported")
    out["total_owned"] = sum(v for k, v in out.items() if k not in not_owned)
    return out


def _read_text(fn: Any, *args: Any) -> str:
    """Calls a geist `(…, char *buf, size_t cap, size_t *needed)` function, growing the buffer."""
    needed = ffi.new("size_t *")
    cap = 4096
    while True:
        buf = ffi.new("char[]", cap)
        status = fn(*args, buf, cap, needed)
        if status == ERR_BUFFER_TOO_SMALL and needed[0] > cap:
            cap = int(needed[0])
            continue
        check(status)
        return str(ffi.string(buf).decode("utf-8", "replace"))


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """A native handle: `with` closes it, and so does garbage collection (close() is idempotent)."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Engine(_Handle):
    """Chooses the backend; owns what its models share. Most code uses the default engine."""

    def __init__(self, backend: str | None = None, n_threads: int = 0,
                 exact_activations: bool = False, *, device: str | int | None = None,
                 device_memory_limit: int = 0, no_import: bool = False,
                 vulkan_loader: str | None = None, attn_chunk: int = 0,
                 device_profile: bool = False, int_dot: bool | None = None,
                 attn_per_head: bool = False, fast: bool = False) -> None:
        """exact_activations: float activations in products with quantized weights (cpu_scalar
        only; the default rounds them to 8 bits first, as llama.cpp and every backend do).
        Device backends (backend="vulkan"): device picks one by index or name substring (None:
        "auto", see geist.h); device_memory_limit caps its bytes (0: none); no_import always
        copies the weights to the device; vulkan_loader names the loader library to open;
        attn_chunk: N > 0 splits a decode row's positions into chunks of N over several
        workgroups (another sum order than cpu_scalar's); -1 (ATTN_EXACT) runs every row's
        attention in cpu_scalar's order (bit for bit); 0 (the default) is the device's choice:
        chunks of 32 on a GPU, the exact order on a CPU device (geist.h device_attn_chunk);
        device_profile: a
        timestamp after every dispatch, so Model.device_profile() splits the GPU time by role
        (GEIST_DEVICE_PROFILE; a few percent slower); int_dot: the device's integer dot
        products in the quantized products, None where it reports them accelerated, True
        wherever it has them (GeistError where it has none), False never: the same bits always
        (GEIST_DEVICE_INT_DOT, GEIST_DEVICE_NO_INT_DOT); attn_per_head: the attention one
        workgroup per query head, not per group of query heads sharing a KV head (the same bits;
        GEIST_DEVICE_ATTN_PER_HEAD); fast: decode's products on float activations with the
        device's own arithmetic, not cpu_scalar's 8-bit activations, and decode rows' attention
        in the device's own order (faster on a GPU; logits within a tolerance, not bit for bit:
        GEIST_DEVICE_FAST, docs/VULKAN.md)."""
        opts = ffi.new("geist_engine_options *")
        lib.geist_engine_options_default(opts)
        opts.activations = 1 if exact_activations else 0
        self._backend_name = ffi.new("char[]", (backend or "auto").encode())
        opts.backend = self._backend_name
        opts.n_threads = n_threads
        self._device_name = (ffi.new("char[]", str(device).encode()) if device is not None
                             else ffi.NULL)
        opts.device = self._device_name
        opts.device_memory_limit = device_memory_limit
        opts.device_flags = ((lib.GEIST_DEVICE_NO_IMPORT if no_import else 0)
                             | (lib.GEIST_DEVICE_PROFILE if device_profile else 0)
                             | (0 if int_dot is None else lib.GEIST_DEVICE_INT_DOT if int_dot
                                else lib.GEIST_DEVICE_NO_INT_DOT)
                             | (lib.GEIST_DEVICE_ATTN_PER_HEAD if attn_per_head else 0)
                             | (lib.GEIST_DEVICE_FAST if fast else 0))
        self._loader_name = (ffi.new("char[]", vulkan_loader.encode()) if vulkan_loader
                             else ffi.NULL)
        opts.vulkan_loader = self._loader_name
        opts.device_attn_chunk = attn_chunk
        out = ffi.new("geist_engine **")
        check(lib.geist_engine_create(opts, out))
        self._ptr: Any = out[0]
        self._models: weakref.WeakSet[Model] = weakref.WeakSet()
        self._runtime: Any = None  # geist.runtime.Runtime, made on the first submit

    @property
    def backend(self) -> str:
        return str(ffi.string(lib.geist_engine_backend_name(self._ptr)).decode())

    @property
    def device(self) -> str:
        """The device's name ("" on the CPU backends)."""
        return str(ffi.string(lib.geist_engine_device_name(self._ptr)).decode())

    def memory(self) -> dict[str, int]:
        """Sum of model.memory() over this engine's open models, their sessions and their
        shared prefixes (each prefix counted once, under `shared_prefix`)."""
        total: dict[str, int] = {}
        for m in list(self._models):
            if m._ptr is None:
                continue
            parts = [m.memory()] + [p.memory() for p in list(m._prefixes) if p._ptr is not None]
            for s in list(m._sessions):
                if s._ptr is not None:
                    own = s.memory()
                    own["shared_prefix"] = 0  # the prefix itself is counted once above
                    parts.append(own)
            for part in parts:
                for k, v in part.items():
                    if k != "total_owned":
                        total[k] = total.get(k, 0) + v
        not_owned = ("weights_aliased", "mapped_file")
        total["total_owned"] = sum(v for k, v in total.items() if k not in not_owned)
        return total

    def configure_runtime(self, options: Any) -> None:
        """Scheduling knobs of async requests (a geist.runtime.RuntimeOptions)."""
        from geist.runtime import runtime_of

        runtime_of(self).configure(options)

    def close(self) -> None:
        if self._ptr is not None:
            for m in list(self._models):
                m.close()
            if self._runtime is not None:
                self._runtime.stop()
            lib.geist_engine_free(self._ptr)
            self._ptr = None



def backends_available() -> str:
    """Names of the backends compiled into the library, comma-separated ("cpu_x86,cpu_scalar,
    vulkan"); a listed device backend may still find no device here (Engine says why)."""
    return str(ffi.string(lib.geist_backends_available()).decode())


_default_engines: dict[str | None, Engine] = {}
_default_lock = threading.Lock()


def default_engine(backend: str | None = None) -> Engine:
    with _default_lock:
        eng = _default_engines.get(backend)
        if eng is None:
            eng = Engine(backend)
            _default_engines[backend] = eng
        return eng


class Model(_Handle):
    """A loaded GGUF model. Weights are used in place: from a file mapping (`load`) or from the
    caller's buffer (`from_buffer`, zero-copy; the model keeps a reference to the buffer)."""

    def __init__(self, ptr: Any, engine: Engine, keepalive: Any = None, path: str | None = None):
        self._ptr: Any = ptr
        self._engine = engine
        self._keepalive = keepalive  # the caller's buffer and its cffi view: bytes must outlive us
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._prefixes: weakref.WeakSet[Prefix] = weakref.WeakSet()
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

    def device_stats(self) -> dict[str, int]:
        """A device backend's forward-pass counters since load (geist.h geist_device_stats:
        passes, rows, dispatches, barriers, host nanoseconds by phase, GPU nanoseconds); zeros
        on the CPU backends."""
        st = ffi.new("geist_device_stats *")
        check(lib.geist_model_device_stats(self._require(), st))
        return {k: int(getattr(st, k)) for k in (
            "passes", "rows", "logit_rows", "dispatches", "barriers", "recorded", "plan_ns",
            "record_ns", "wait_ns", "readback_ns", "gpu_ns", "gpu_timed", "id_rows",
            "fused_fma", "fast_attn_rows", "fast_rows", "planned")}

    def device_profile(self) -> dict[str, tuple[int, int]]:
        """With Engine(device_profile=True): the GPU nanoseconds and dispatch count by role
        since load (geist.h geist_device_role: "qkv", "attention", "ffn_down", ...); zeros
        otherwise."""
        st = ffi.new("geist_device_stats *")
        check(lib.geist_model_device_stats(self._require(), st))
        return {name: (int(st.role_ns[i]), int(st.role_calls[i]))
                for name, i in DEVICE_ROLES.items()}

    # -- text ------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False
                 ) -> list[int]:
        """Token ids of `text`. add_special adds BOS/EOS as the model's metadata says;
        parse_special matches control tokens written in the text (never for player input)."""
        data = text.encode("utf-8")
        flags = (1 if add_special else 0) | (2 if parse_special else 0)
        n = ffi.new("size_t *")
        cap = len(data) + 8
        while True:
            ids = ffi.new("int32_t[]", cap)
            st = lib.geist_tokenize(self._require(), data, len(data), flags, ids, cap, n)
            if st == ERR_BUFFER_TOO_SMALL and n[0] > cap:
                cap = int(n[0])
                continue
            check(st)
            return list(ids[0 : n[0]])

    def detokenize(self, ids: Sequence[int], render_special: bool = False) -> str:
        arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int32))
        n = ffi.new("size_t *")
        cap = 16 * arr.size + 16
        while True:
            buf = ffi.new("char[]", cap)
            st = lib.geist_detokenize(self._require(), ffi.from_buffer("int32_t[]", arr),
                                      arr.size, 1 if render_special else 0, buf, cap, n)
            if st == ERR_BUFFER_TOO_SMALL and n[0] > cap:
                cap = int(n[0])
                continue
            check(st)
            return bytes(ffi.buffer(buf, n[0])).decode("utf-8", "replace")

    def token_piece(self, token: int, render_special: bool = True) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        n = ffi.new("size_t *")
        cap = 64
        while True:
            buf = ffi.new("char[]", cap)
            st = lib.geist_token_piece(self._require(), token, 1 if render_special else 0, buf,
                                       cap, n)
            if st == ERR_BUFFER_TOO_SMALL and n[0] > cap:
                cap = int(n[0])
                continue
            check(st)
            return bytes(ffi.buffer(buf, n[0]))

    def special_tokens(self) -> dict[str, int]:
        out = ffi.new("geist_special_tokens *")
        out.struct_size = ffi.sizeof("geist_special_tokens")
        check(lib.geist_model_special_tokens(self._require(), out))
        return {k: int(getattr(out, k)) for k in ("bos", "eos", "eot", "unk", "pad", "add_bos",
                                                    "add_eos")}

    def is_end_token(self, token: int) -> bool:
        return bool(lib.geist_token_is_end(self._require(), token))

    def chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True,
                      template: str | None = None) -> str:
        """Renders the model's chat template (or `template`) for {role, content} messages."""
        keep = []
        arr = ffi.new("geist_chat_message[]", len(messages))
        for i, msg in enumerate(messages):
            role = ffi.new("char[]", msg["role"].encode())
            content = ffi.new("char[]", msg["content"].encode())
            keep += [role, content]
            arr[i].role = role
            arr[i].content = content
        tmpl = ffi.new("char[]", template.encode()) if template is not None else ffi.NULL
        return _read_text(lib.geist_chat_apply_template, self._require(), tmpl, arr,
                          len(messages), 1 if add_generation_prompt else 0)

    def chat_stop_strings(self) -> list[str]:
        """Strings that end an assistant turn for this model's chat template family."""
        out = ffi.new("const char *[]", 8)
        n = ffi.new("size_t *")
        check(lib.geist_chat_stop_strings(self._require(), out, 8, n))
        return [ffi.string(out[i]).decode() for i in range(n[0])]

    # -- sessions ----------------------------------------------------------------------------------

    def session(self, max_seq_len: int = 512, kv_mode: str = "f16", seed: int = 0,
                prefix: Prefix | None = None) -> Session:
        """A new session. With `prefix`, it starts holding the shared prefix's tokens (read in
        place, never copied); max_seq_len counts them too."""
        if kv_mode not in KV_MODES:
            raise GeistError(f"unknown kv_mode {kv_mode!r}; choose from {sorted(KV_MODES)}", 1)
        opts = ffi.new("geist_session_options *")
        lib.geist_session_options_default(opts)
        opts.max_seq_len = max_seq_len
        opts.kv_mode = KV_MODES[kv_mode]
        opts.seed = seed
        out = ffi.new("geist_session **")
        if prefix is None:
            check(lib.geist_session_create(self._require(), opts, out))
        else:
            check(lib.geist_session_create_with_prefix(self._require(), prefix._require(), opts,
                                                       out))
        return self._adopt(out[0], kv_mode, seed, prefix)

    def _adopt(self, ptr: Any, kv_mode: str, seed: int, prefix: Prefix | None) -> Session:
        s = Session(ptr, self, kv_mode)
        s.seed = seed
        s._prefix = prefix
        s._sync_history()
        self._sessions.add(s)
        return s

    def prefix(self, ids: Sequence[int] | np.ndarray, kv_mode: str = "f16") -> Prefix:
        """Computes a persona / world prefix once; sessions made with `session(prefix=...)`
        share its KV read-only."""
        if kv_mode not in KV_MODES:
            raise GeistError(f"unknown kv_mode {kv_mode!r}; choose from {sorted(KV_MODES)}", 1)
        arr = Session._ids(ids)
        out = ffi.new("geist_prefix **")
        check(lib.geist_prefix_create(self._require(), ffi.from_buffer("int32_t[]", arr),
                                      arr.size, KV_MODES[kv_mode], out))
        p = Prefix(out[0], self, arr.tolist(), kv_mode)
        self._prefixes.add(p)
        return p

    def close(self) -> None:
        """Frees the model (and closes its sessions and prefixes first)."""
        if self._ptr is not None:
            for s in list(self._sessions):
                s.close()
            for p in list(self._prefixes):
                p.close()
            lib.geist_model_free(self._ptr)
            self._ptr = None
            self._keepalive = None



class Prefix(_Handle):
    """A shared, read-only prefix (persona, world lore): its KV is computed once and read in place
    by every session created on it. Freed when closed and its last session is closed."""

    def __init__(self, ptr: Any, model: Model, ids: list[int], kv_mode: str) -> None:
        self._ptr: Any = ptr
        self.model = model
        self.ids = ids
        self.kv_mode = kv_mode

    def _require(self) -> Any:
        if self._ptr is None:
            raise StateError("prefix is closed")
        return self._ptr

    def __len__(self) -> int:
        return len(self.ids)

    def memory(self) -> dict[str, int]:
        """Its resident bytes: the KV under `shared_prefix` (once, however many sessions)."""
        rep = ffi.new("geist_memory_report *")
        check(lib.geist_prefix_memory(self._require(), rep))
        return _report_to_dict(rep)

    def close(self) -> None:
        if self._ptr is not None:
            lib.geist_prefix_free(self._ptr)
            self._ptr = None



class Session(_Handle):
    """One conversation's state (KV cache sized from `max_seq_len`). Use from one thread at a
    time; different sessions may run on different threads at once."""

    def __init__(self, ptr: Any, model: Model, kv_mode: str) -> None:
        self._ptr: Any = ptr
        self.model = model
        self.kv_mode = kv_mode
        self.seed = 0
        self.history: list[int] = []  # every token the session holds, in order
        self.last_result: GenerationResult | None = None  # of the last generate()/chat()
        self._prefix: Prefix | None = None  # keeps the Python object alive while we use it
        self._lock = threading.Lock()
        self._active: Any = None  # the RequestHandle of the running async request

    def _sync_history(self) -> None:
        """Reads the token ids the native session holds into `history`."""
        n = ffi.new("size_t *")
        cap = max(self.n_past, 1)
        ids = ffi.new("int32_t[]", cap)
        check(lib.geist_session_tokens(self._require(), ids, cap, n))
        self.history = list(ids[0 : n[0]])

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
            self.history += arr.tolist()

    def decode(self, token: int) -> None:
        with self._lock:
            check(lib.geist_session_decode(self._require(), int(token)))
            self.history.append(int(token))

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
            self.history += arr.tolist()
        return res

    def reset(self) -> None:
        """Forgets every token (a shared prefix's stay)."""
        with self._lock:
            lib.geist_session_reset(self._require())
            self._sync_history()

    def truncate(self, n: int) -> None:
        """Rewinds to the first n tokens (drops the logits: decode or prefill next)."""
        with self._lock:
            check(lib.geist_session_truncate(self._require(), int(n)))
            self._sync_history()

    def snapshot(self) -> bytes:
        """A self-describing image of the state (used rows only; see geist_session_snapshot)."""
        needed = ffi.new("size_t *")
        with self._lock:
            st = lib.geist_session_snapshot(self._require(), ffi.NULL, 0, needed)
            if st not in (OK, ERR_BUFFER_TOO_SMALL):
                check(st)
            buf = bytearray(int(needed[0]))
            check(lib.geist_session_snapshot(self._require(), ffi.from_buffer(buf), len(buf),
                                             needed))
        return bytes(buf)

    def restore(self, image: bytes | bytearray | memoryview) -> None:
        """Replaces the state with a snapshot's; on any error the session is unchanged."""
        view = ffi.from_buffer(image, require_writable=False)
        with self._lock:
            check(lib.geist_session_restore(self._require(), view, len(view)))
            self._sync_history()

    def fork(self) -> Session:
        """A new session with the same state (deep copy of the KV; shares the prefix)."""
        out = ffi.new("geist_session **")
        with self._lock:
            check(lib.geist_session_fork(self._require(), out))
        return self.model._adopt(out[0], self.kv_mode, self.seed, self._prefix)

    def memory(self) -> dict[str, int]:
        rep = ffi.new("geist_memory_report *")
        check(lib.geist_session_memory(self._require(), rep))
        return _report_to_dict(rep)

    # -- text generation ---------------------------------------------------------------------------
    # One loop for all of these: the core's runtime (geist.runtime); nothing is generated here.

    def generate(self, prompt: str | Sequence[int] = "", max_tokens: int = 128,
                 stop: Sequence[str] = (), *, options: SamplerOptions | None = None,
                 seed: int | None = None, parse_special: bool = False,
                 actions: Sequence[Any] = (), action_choice: str = "auto",
                 grammar: str | None = None, json_schema: str | dict[str, Any] | None = None,
                 **sampling: float | int) -> Generation:
        """Appends the prompt (text or ids) and streams the reply: iterate the returned
        Generation for Pieces, or call its `.result()` (text, ids, finish_reason, counts).

        Text is tokenized with BOS/EOS only when the session is empty; "" continues from the
        session's logits. Generation ends at an end token, a stop string (not included in the
        output), max_tokens, or the session's cap. Sampling: `options` (a SamplerOptions), then
        any of its fields as keywords (temperature=0.0, top_k=...); seed defaults to the
        session's. An ids prompt that cannot fit raises CapacityError at once. Constrained
        output: `grammar` (GBNF) or `json_schema` (str or dict); see docs/GRAMMAR.md. `actions`
        (geist.actions.Action or dicts): the reply is speech and maybe one call, parsed into
        the result's `.action` (action_choice "required": always a call)."""
        from geist.runtime import submit

        return Generation(submit(self, prompt, max_tokens, stop, options=options, seed=seed,
                                 parse_special=parse_special, record_last=True, grammar=grammar,
                                 json_schema=json_schema, actions=actions,
                                 action_choice=action_choice, **sampling))

    def chat(self, messages: Sequence[Mapping[str, str]], max_tokens: int = 128,
             stop: Sequence[str] = (), *, context: ContextPolicy | None = None,
             options: SamplerOptions | None = None, seed: int | None = None,
             actions: Sequence[Any] = (), action_choice: str = "auto",
             grammar: str | None = None, json_schema: str | dict[str, Any] | None = None,
             **sampling: float | int) -> Generation:
        """Streams the reply to a conversation: `messages` is the whole conversation so far
        ({role, content} dicts). The core renders the model's chat template, keeps the KV of
        what the session already holds (only new tokens are prefilled), drops the oldest turns
        when the cap would be exceeded (keeping the persona; see ContextPolicy) and ends the
        reply at the template's end-of-turn strings too. The result reports n_reused,
        n_prompt and n_dropped. Constrained output: `grammar` (GBNF) or `json_schema`.
        `actions`: as in generate (the action list goes into the system message, geist.h
        "Actions")."""
        from geist.runtime import submit

        return Generation(submit(self, list(messages), max_tokens, stop, options=options,
                                 context=context, seed=seed, record_last=True, grammar=grammar,
                                 json_schema=json_schema, actions=actions,
                                 action_choice=action_choice, **sampling))

    def submit(self, prompt: Any = "", max_tokens: int = 128, stop: Sequence[str] = (),
               **kwargs: Any) -> Any:
        """Queues an asynchronous request (text, ids or chat messages) and returns a
        geist.runtime.RequestHandle at once: `.result()`, iteration over streamed pieces,
        `await .aresult()`. Keyword arguments: priority, context, options, seed, grammar,
        json_schema, actions, action_choice and the SamplerOptions fields."""
        from geist.runtime import submit

        return submit(self, prompt, max_tokens, stop, **kwargs)

    def close(self) -> None:
        with self._lock:
            if self._ptr is not None:
                lib.geist_session_free(self._ptr)
                self._ptr = None


class Generation:
    """A request started by Session.generate or Session.chat: iterate it for the streamed
    Pieces, or call `.result()` to wait for the GenerationResult. `cancel()` stops it."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __iter__(self) -> Iterator[Piece]:
        return self.handle.pieces()

    def result(self, timeout: float | None = None) -> GenerationResult:
        return self.handle.result(timeout)  # type: ignore[no-any-return]

    def text(self, timeout: float | None = None) -> str:
        return self.result(timeout).text

    def cancel(self) -> None:
        self.handle.cancel()
