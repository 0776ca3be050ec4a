"""Asynchronous generation over the native runtime (geist.h "Runtime"): the SDK's one way to
generate. `Session.generate`, `Session.chat` and `Session.submit` all queue a request here.

`session.submit(...)` queues a request and returns a `RequestHandle` at once; the engine's
runtime thread runs it, batched with the other sessions' requests. One dispatcher thread per
engine drains the native event queue (`geist_poll`) and routes events to their handles, so a
handle can be waited on (`.result()`), iterated for streamed text pieces, or awaited from asyncio
(`await handle.aresult()`, `async for piece in handle.astream()`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from geist._binding import (
    ERR_INVALID_ARGUMENT,
    ERR_STATE,
    EVENT_ACTION,
    EVENT_FAILED,
    EVENT_TOKEN,
    FINISH_REASONS,
    OK,
    check,
    ffi,
    lib,
)
from geist.actions import Action, ActionCall, fill_request
from geist.errors import GeistError, StateError, error_for_status
from geist.generate import ContextPolicy, GenerationResult, Piece
from geist.sampling import SamplerOptions

if TYPE_CHECKING:
    from geist.model import Engine, Session

RequestResult = GenerationResult  # the one result type (older name)
Prompt = str | Sequence[int] | Sequence[Mapping[str, str]]


@dataclass
class RuntimeOptions:
    """Scheduling knobs (geist_runtime_options)."""

    budget_ms: float = 0.0  # at most this much worker time per period_ms; 0 = no budget
    period_ms: float = 16.0
    prefill_chunk: int = 64  # prompt tokens one step may take from pending prefills
    max_batch: int = 64  # most rows per step


class RequestHandle:
    """One submitted request. Thread-safe; its events arrive on the dispatcher thread."""

    def __init__(self, runtime: Runtime, session: Session, record_last: bool = False) -> None:
        self.id = 0
        self.session = session
        self._runtime = runtime
        self._record_last = record_last  # Session.generate/chat: also set session.last_result
        self._cond = threading.Condition()
        self._pieces: list[tuple[str, int]] = []  # (text, token) per TOKEN event
        self._done = False
        self._result = GenerationResult()
        self._t0 = 0.0
        self._listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = []

    @property
    def done(self) -> bool:
        with self._cond:
            return self._done

    def cancel(self) -> None:
        """Asks the runtime to stop the request (ends within one step, reason "cancelled")."""
        if self.done:
            return
        st = lib.geist_cancel(self._runtime.engine._ptr, self.id)
        if st not in (OK, ERR_INVALID_ARGUMENT):  # invalid: it ended meanwhile
            check(st)

    def result(self, timeout: float | None = None) -> GenerationResult:
        """Waits for the end and returns the result; raises the request's error if it failed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError(f"request {self.id} still running after {timeout} s")
            if self._result.error is not None:
                raise self._result.error
            return self._result

    def _events(self) -> Iterator[tuple[str, int]]:
        i = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda n=i: self._done or len(self._pieces) > n)
                new = self._pieces[i:]
                done = self._done
                err = self._result.error
            i += len(new)
            yield from new
            if done and i >= len(self._pieces):
                if err is not None:
                    raise err
                return

    def __iter__(self) -> Iterator[str]:
        """Streamed text pieces as they arrive (their concatenation is the whole reply)."""
        return (text for text, _ in self._events() if text)

    def pieces(self) -> Iterator[Piece]:
        """Streamed pieces with the token ids that completed each (a token whose text is held
        back, e.g. part of a character or of a possible stop string, joins the next piece)."""
        ids: list[int] = []
        for text, token in self._events():
            ids.append(token)
            if text:
                yield Piece(text, ids)
                ids = []

    # -- asyncio ---------------------------------------------------------------------------------

    async def aresult(self) -> GenerationResult:
        """`await handle.aresult()`: the result without blocking the event loop."""
        async for _ in self.astream():
            pass
        return self.result(timeout=0)

    async def astream(self) -> AsyncIterator[str]:
        """`async for piece in handle.astream()`."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._cond:
            backlog = [text for text, _ in self._pieces]
            done = self._done
            if not done:
                self._listeners.append((loop, queue))
        for p in backlog:
            if p:
                yield p
        if done:
            if self._result.error is not None:
                raise self._result.error
            return
        while True:
            item = await queue.get()
            if item is None:
                break
            if item:
                yield item
        if self._result.error is not None:
            raise self._result.error

    # -- dispatcher side -------------------------------------------------------------------------

    def _notify(self, item: str | None) -> None:
        for loop, q in self._listeners:
            loop.call_soon_threadsafe(q.put_nowait, item)

    def _on_event(self, ev: Mapping[str, Any], now: float) -> None:
        with self._cond:
            if self._done:
                return
            r = self._result
            if ev["type"] == EVENT_TOKEN:
                if r.first_token_s is None:
                    r.first_token_s = now - self._t0
                r.ids.append(ev["token"])
                self._pieces.append((ev["text"], ev["token"]))
                self._notify(ev["text"])
            elif ev["type"] == EVENT_ACTION:
                r.action = ActionCall.from_json(ev["text"])
            else:
                if ev["type"] == EVENT_FAILED:
                    r.error = error_for_status(ev["status"], ev["text"])
                    r.finish_reason = "failed"
                else:
                    r.text = ev["text"]
                    r.finish_reason = FINISH_REASONS.get(ev["reason"], str(ev["reason"]))
                r.n_prompt, r.n_reused = ev["n_prompt"], ev["n_reused"]
                r.n_dropped = ev["n_dropped"]
                r.elapsed_s = now - self._t0
                self._sync_history()
                self._done = True
                self._notify(None)
                self._listeners.clear()
            self._cond.notify_all()

    def _sync_history(self) -> None:
        s = self.session
        # the session's lock: close() on another thread must not free it while we read it
        with s._lock:
            if self._record_last:
                s.last_result = self._result
            if s._ptr is None:
                return
            s._sync_history()  # the native session knows the tokens it holds
            s._active = None


def _event_dict(e: Any) -> dict[str, Any]:
    text = bytes(ffi.buffer(e.text, e.text_len)).decode("utf-8", "replace") \
        if e.text != ffi.NULL else ""
    return {"type": int(e.type), "token": int(e.token), "text": text,
            "reason": int(e.finish_reason), "status": int(e.status),
            "n_prompt": int(e.n_prompt), "n_reused": int(e.n_reused),
            "n_dropped": int(e.n_dropped)}


class Runtime:
    """An engine's runtime: submits requests and runs the dispatcher thread that polls events."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._handles: dict[int, RequestHandle] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._events = ffi.new("geist_event[]", 256)

    def configure(self, options: RuntimeOptions) -> None:
        o = ffi.new("geist_runtime_options *")
        lib.geist_runtime_options_default(o)
        o.budget_ms = options.budget_ms
        o.period_ms = options.period_ms
        o.prefill_chunk = options.prefill_chunk
        o.max_batch = options.max_batch
        check(lib.geist_runtime_configure(self.engine._ptr, o))

    def submit(self, session: Session, req: Any, keep: list[Any],
               record_last: bool = False) -> RequestHandle:
        """Queues a filled geist_request (keep: the cffi objects it points into)."""
        handle = RequestHandle(self, session, record_last)
        out = ffi.new("uint64_t *")
        self._ensure_thread()
        with self._lock:  # registered before its first event can be routed
            handle._t0 = time.perf_counter()
            check(lib.geist_submit(self.engine._ptr, session._require(), req, out))
            handle.id = int(out[0])
            self._handles[handle.id] = handle
        del keep
        return handle

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="geist-events",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        ev = self._events
        while not self._stop.is_set():
            n = lib.geist_poll(self.engine._ptr, ev, 256, 20)
            now = time.perf_counter()
            with self._lock:
                for i in range(n):
                    e = ev[i]
                    rid = int(e.request_id)
                    h = self._handles.get(rid)
                    if h is None:
                        continue
                    if e.type not in (EVENT_TOKEN, EVENT_ACTION):  # the end events
                        del self._handles[rid]
                    h._on_event(_event_dict(e), now)

    def stop(self) -> None:
        """Stops the dispatcher (called by Engine.close before the engine is freed)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self._thread = None
        with self._lock:
            handles = list(self._handles.values())
            self._handles.clear()
        for h in handles:
            h._on_event({"type": EVENT_FAILED, "token": -1, "text": "the engine was closed",
                         "reason": 0, "status": ERR_STATE, "n_prompt": 0, "n_reused": 0,
                         "n_dropped": 0}, 0.0)


def _cstr(text: str, what: str, keep: list[Any]) -> Any:
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{what} must not contain NUL characters")
    c = ffi.new("char[]", data)
    keep.append(c)
    return c


def submit(session: Session, prompt: Prompt = "", max_tokens: int = 128,
           stop: Sequence[str] = (), *, priority: int = 0,
           options: SamplerOptions | None = None, context: ContextPolicy | None = None,
           seed: int | None = None, parse_special: bool = False, record_last: bool = False,
           actions: Sequence[Action | Mapping[str, Any]] = (), action_choice: str = "auto",
           grammar: str | None = None, json_schema: str | dict[str, Any] | None = None,
           **sampling: float | int) -> RequestHandle:
    """Session.submit: the prompt is text, token ids, or chat messages ({role, content} dicts:
    the whole conversation so far; the core renders it with the model's template, reuses the KV
    the session holds and trims the oldest turns as `context` says). Sampling: `options` (a
    SamplerOptions), then any of its fields as keywords; seed defaults to the session's.
    actions: Actions (or {name, description, parameters} dicts) the reply may call
    (geist.actions); action_choice "auto" (speech, maybe a call) or "required" (a call).
    Constrained output: `grammar` (GBNF text) or `json_schema` (a JSON Schema, str or dict);
    a grammar that does not compile raises InvalidArgumentError here; a reply the grammar ends
    finishes with "grammar" (docs/GRAMMAR.md)."""
    from geist.grammar import grammar_request

    gram = grammar_request(grammar, json_schema)
    if session._active is not None and not session._active.done:
        raise StateError("the session already has an active request (one at a time)")
    opts = (options or SamplerOptions()).replace(**sampling)
    opts = opts.replace(seed=session.seed if seed is None else seed)
    keep: list[Any] = []
    req = ffi.new("geist_request *")
    lib.geist_request_default(req)
    if isinstance(prompt, str) and (parse_special or not prompt):
        # "" continues from the session's logits; control tokens only when asked (never player
        # text): both as ids
        prompt = session.model.tokenize(prompt, add_special=session.n_past == 0,
                                        parse_special=True) if prompt else []
    if isinstance(prompt, str):
        req.text = _cstr(prompt, "prompt", keep)
    elif len(prompt) and isinstance(prompt[0], Mapping):
        msgs = ffi.new("geist_chat_message[]", len(prompt))
        keep.append(msgs)
        for i, m in enumerate(prompt):
            if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
                raise GeistError(f"message {i} needs a role and a content", ERR_INVALID_ARGUMENT)
            msgs[i].role = _cstr(str(m["role"]), "role", keep)
            msgs[i].content = _cstr(str(m["content"]), "content", keep)
        req.messages = msgs
        req.n_messages = len(prompt)
        (context or ContextPolicy()).fill(req.context)
    else:
        ids = [int(t) for t in prompt]  # type: ignore[union-attr]
        arr = ffi.new("int32_t[]", max(len(ids), 1))
        keep.append(arr)
        arr[0 : len(ids)] = ids
        req.ids = arr
        req.n_ids = len(ids)
    req.sampler = opts.to_native()[0]
    req.max_tokens = max_tokens
    stops = [_cstr(x, "stop string", keep) for x in stop]
    if stops:
        arr_s = ffi.new("char *[]", stops)
        keep.append(arr_s)
        req.stop = arr_s
        req.n_stop = len(stops)
    req.priority = priority
    if actions:
        fill_request(req, actions, action_choice, keep)
    if gram is not None:
        req.grammar = _cstr(gram[0], "grammar", keep)
        req.grammar_kind = gram[1]
    handle = runtime_of(session.model._engine).submit(session, req, keep, record_last)
    session._active = handle
    return handle


def runtime_of(engine: Engine) -> Runtime:
    rt = getattr(engine, "_runtime", None)
    if rt is None:
        if engine._ptr is None:
            raise StateError("engine is closed")
        rt = Runtime(engine)
        engine._runtime = rt
    return rt


_BENCH_WORDS = ("forest", "castle", "harbor", "desert", "village", "mountain", "library",
                "market", "river", "tower", "garden", "island", "cave", "bridge", "temple", "farm")


def bench_npcs(model: Any, counts: Sequence[int], tokens: int = 64,
               max_seq_len: int = 256) -> dict[str, Any]:
    """Aggregate decode speed with N sessions decoding at once (greedy), per-NPC latency, and a
    high-priority request's first-token latency while 8 background requests run."""

    def run(n: int, prio_probe: bool = False) -> dict[str, Any]:
        sessions = [model.session(max_seq_len) for _ in range(n)]
        prompts = [f"Once upon a time, in a {_BENCH_WORDS[i % 16]} far away, there lived"
                   for i in range(n)]
        t0 = time.perf_counter()
        handles = [s.submit(p, max_tokens=tokens, temperature=0.0)
                   for s, p in zip(sessions, prompts, strict=True)]
        out: dict[str, Any] = {"npcs": n}
        if prio_probe:
            time.sleep(0.5)  # let the background requests reach steady decoding
            probe = model.session(max_seq_len)
            h = probe.submit("The guard shouts: stop right there, traveller!", max_tokens=4,
                             temperature=0.0, priority=10)
            r = h.result(600)
            out["priority_first_token_ms"] = (r.first_token_s or 0.0) * 1e3
            probe.close()
        results = [h.result(600) for h in handles]
        wall = time.perf_counter() - t0
        ntok = sum(len(r.ids) for r in results)
        out["tokens"] = ntok
        out["aggregate_tps"] = ntok / wall
        out["first_token_ms_mean"] = 1e3 * sum(r.first_token_s or 0.0 for r in results) / n
        steps = [(r.elapsed_s - (r.first_token_s or 0.0)) / max(len(r.ids) - 1, 1)
                 for r in results]
        out["ms_per_token_per_npc"] = 1e3 * sum(steps) / n
        for s in sessions:
            s.close()
        return out

    rows = [run(n) for n in counts]
    base = rows[0]["aggregate_tps"] if rows and rows[0]["npcs"] == 1 else None
    for r in rows:
        if base:
            r["speedup_vs_1"] = r["aggregate_tps"] / base
    # the priority probe: its own prefill alone, then submitted while 8 requests decode
    s = model.session(max_seq_len)
    ids = model.tokenize("The guard shouts: stop right there, traveller!")
    t0 = time.perf_counter()
    s.prefill(ids)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    s.close()
    probe = run(8, prio_probe=True)
    # the frame budget: 8 NPCs limited to 8 ms of work per 16 ms, against the same unlimited
    engine = model._engine
    free = run(8)["aggregate_tps"]
    engine.configure_runtime(RuntimeOptions(budget_ms=8.0, period_ms=16.0))
    try:
        limited = run(8)["aggregate_tps"]
    finally:
        engine.configure_runtime(RuntimeOptions())
    return {"rows": rows, "priority": {
        "first_token_ms": probe["priority_first_token_ms"],
        "batched_step_ms": probe["ms_per_token_per_npc"],
        "own_prefill_ms": prefill_ms,
        "bound_ms": 2 * probe["ms_per_token_per_npc"] + prefill_ms},
        "budget": {"budget_ms": 8.0, "period_ms": 16.0, "npcs": 8, "aggregate_tps": limited,
                   "unlimited_tps": free, "share": limited / free}}
