"""Asynchronous generation over the native runtime (geist.h "Runtime").

`session.submit(...)` queues a request and returns a `RequestHandle` at once; the engine's
runtime thread runs it, batched with the other sessions' requests. One dispatcher thread per
engine drains the native event queue (`geist_poll`) and routes events to their handles, so a
handle can be waited on (`.result()`), iterated for streamed text pieces, or awaited from asyncio
(`await handle.aresult()`, `async for piece in handle.astream()`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geist._binding import check, ffi, lib
from geist.errors import GeistError, StateError, error_for_status
from geist.generate import SamplerOptions

if TYPE_CHECKING:
    from geist.model import Engine, Session

FINISH_REASONS = {0: "stop", 1: "length", 2: "capacity", 3: "cancelled"}
_TOKEN, _FINISHED, _FAILED = 1, 2, 3


@dataclass
class RuntimeOptions:
    """Scheduling knobs (geist_runtime_options)."""

    budget_ms: float = 0.0  # at most this much worker time per period_ms; 0 = no budget
    period_ms: float = 16.0
    prefill_chunk: int = 64  # prompt tokens one step may take from pending prefills
    max_batch: int = 64  # most rows per step


@dataclass
class RequestResult:
    text: str = ""
    ids: list[int] = field(default_factory=list)
    finish_reason: str = ""  # stop, length, capacity, cancelled
    error: GeistError | None = None
    first_token_s: float | None = None  # seconds from submit to the first token event
    elapsed_s: float = 0.0


class RequestHandle:
    """One submitted request. Thread-safe; its events arrive on the dispatcher thread."""

    def __init__(self, runtime: Runtime, session: Session, prompt_ids: list[int]) -> None:
        self.id = 0
        self.session = session
        self._runtime = runtime
        self._prompt_ids = prompt_ids
        self._cond = threading.Condition()
        self._pieces: list[str] = []
        self._done = False
        self._result = RequestResult()
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
        if st not in (0, 1):  # 1: it ended meanwhile
            check(st)

    def result(self, timeout: float | None = None) -> RequestResult:
        """Waits for the end and returns the result; raises the request's error if it failed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError(f"request {self.id} still running after {timeout} s")
            if self._result.error is not None:
                raise self._result.error
            return self._result

    def __iter__(self) -> Iterator[str]:
        """Streamed text pieces as they arrive (their concatenation is the whole reply)."""
        i = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda n=i: self._done or len(self._pieces) > n)
                new = self._pieces[i:]
                done = self._done
                err = self._result.error
            i += len(new)
            yield from (p for p in new if p)
            if done and i >= len(self._pieces):
                if err is not None:
                    raise err
                return

    # -- asyncio ---------------------------------------------------------------------------------

    async def aresult(self) -> RequestResult:
        """`await handle.aresult()`: the result without blocking the event loop."""
        async for _ in self.astream():
            pass
        return self.result(timeout=0)

    async def astream(self) -> AsyncIterator[str]:
        """`async for piece in handle.astream()`."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._cond:
            backlog = list(self._pieces)
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

    def _on_event(self, typ: int, token: int, text: str, reason: int, status: int,
                  now: float) -> None:
        with self._cond:
            if self._done:
                return
            r = self._result
            if typ == _TOKEN:
                if r.first_token_s is None:
                    r.first_token_s = now - self._t0
                r.ids.append(token)
                self._pieces.append(text)
                self._notify(text)
            else:
                if typ == _FINISHED:
                    r.text = text
                    r.finish_reason = FINISH_REASONS.get(reason, str(reason))
                    streamed = "".join(self._pieces)
                    if text.startswith(streamed) and len(text) > len(streamed):
                        tail = text[len(streamed):]
                        self._pieces.append(tail)
                        self._notify(tail)
                else:
                    r.error = error_for_status(status, text)
                    r.finish_reason = "failed"
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
            if s._ptr is None:
                return
            try:
                s._sync_history()  # the native session knows the tokens it holds
            except GeistError:
                held = s.history + self._prompt_ids + self._result.ids
                s.history = held[: int(lib.geist_session_n_past(s._ptr))]
            s._active = None


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

    def submit(self, session: Session, prompt_ids: Sequence[int], max_tokens: int,
               stop: Sequence[str], options: SamplerOptions, priority: int) -> RequestHandle:
        import time

        handle = RequestHandle(self, session, list(prompt_ids))
        req = ffi.new("geist_request *")
        lib.geist_request_default(req)
        ids = ffi.new("int32_t[]", max(len(prompt_ids), 1))
        ids[0 : len(prompt_ids)] = list(prompt_ids)
        req.ids = ids
        req.n_ids = len(prompt_ids)
        req.sampler = options.to_native()[0]
        req.max_tokens = max_tokens
        keep = [ffi.new("char[]", s.encode()) for s in stop]
        stops = ffi.new("char *[]", keep) if keep else ffi.NULL
        req.stop = stops
        req.n_stop = len(keep)
        req.priority = priority
        out = ffi.new("uint64_t *")
        self._ensure_thread()
        with self._lock:  # registered before its first event can be routed
            handle._t0 = time.perf_counter()
            check(lib.geist_submit(self.engine._ptr, session._require(), req, out))
            handle.id = int(out[0])
            self._handles[handle.id] = handle
        return handle

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="geist-events",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        import time

        ev = self._events
        while not self._stop.is_set():
            n = lib.geist_poll(self.engine._ptr, ev, 256, 20)
            now = time.perf_counter()
            with self._lock:
                for i in range(n):
                    e = ev[i]
                    text = bytes(ffi.buffer(e.text, e.text_len)).decode("utf-8", "replace") \
                        if e.text != ffi.NULL else ""
                    rid = int(e.request_id)
                    h = self._handles.get(rid)
                    if h is None:
                        continue
                    if e.type != _TOKEN:
                        del self._handles[rid]
                    h._on_event(int(e.type), int(e.token), text, int(e.finish_reason),
                                int(e.status), now)

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
            h._on_event(_FAILED, -1, "the engine was closed", 0, 7, 0.0)


def submit(session: Session, prompt: str | Sequence[int] | Sequence[dict[str, str]] = "",
           max_tokens: int = 128, stop: Sequence[str] = (), *, priority: int = 0,
           temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
           repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
           presence_penalty: float = 0.0, penalty_last_n: int = 64, seed: int | None = None,
           parse_special: bool = False) -> RequestHandle:
    """Session.submit: the prompt is text, token ids, or chat messages ({role, content} dicts,
    rendered with the model's template; a session holding an earlier rendering of the same
    conversation prefills only the new tokens)."""
    if session._active is not None and not session._active.done:
        raise StateError("the session already has an active request (one at a time)")
    model = session.model
    if isinstance(prompt, str):
        ids = model.tokenize(prompt, add_special=session.n_past == 0,
                             parse_special=parse_special) if prompt else []
    elif prompt and isinstance(prompt[0], dict):
        text = model.chat_template(prompt, add_generation_prompt=True)  # type: ignore[arg-type]
        ids = model.tokenize(text, add_special=True, parse_special=True)
        held = session.history
        if held and ids[: len(held)] == held and len(ids) > len(held):
            ids = ids[len(held):]
        elif session.n_past:
            session.reset()
    else:
        ids = [int(t) for t in prompt]  # type: ignore[union-attr]
    options = SamplerOptions(temperature, top_k, top_p, min_p, repeat_penalty, frequency_penalty,
                             presence_penalty, penalty_last_n,
                             session.seed if seed is None else seed)
    rt = runtime_of(model._engine)
    try:
        handle = rt.submit(session, ids, max_tokens, stop, options, priority)
    except GeistError:
        raise
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
    import time

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
