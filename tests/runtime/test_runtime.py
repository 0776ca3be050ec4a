"""The async runtime (geist_submit/poll/cancel) through Session.submit: batched results equal
running each session alone, generation semantics equal Session.generate, cancel, priorities,
errors, freeing while running, asyncio."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing
from geist.errors import CapacityError, StateError
from geist.runtime import RuntimeOptions


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("rt")) / f"{request.param}.gguf",
                                 arch=request.param, weight_type="Q8_0", seed=5)
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(path, engine=eng)
    yield m
    m.close()
    eng.close()


def prompts(model: geist.Model, n: int, length: int = 7) -> list[list[int]]:
    rng = np.random.default_rng(11)
    return [[int(x) for x in rng.integers(1, model.n_vocab, length + i)] for i in range(n)]


def test_batched_equals_alone(model: geist.Model) -> None:
    ps = prompts(model, 6)
    alone_ids, alone_logits = [], []
    for p in ps:
        with model.session(max_seq_len=64, kv_mode="f32") as s:
            list(s.generate(p, max_tokens=10, temperature=0.0))
            assert s.last_result is not None
            alone_ids.append(s.last_result.ids)
            alone_logits.append(s.logits())
    sessions = [model.session(max_seq_len=64, kv_mode="f32") for _ in ps]
    model._engine.configure_runtime(RuntimeOptions(prefill_chunk=5))  # prefills span steps
    handles = [s.submit(p, max_tokens=10, temperature=0.0)
               for s, p in zip(sessions, ps, strict=True)]
    for h, s, ids, lg in zip(handles, sessions, alone_ids, alone_logits, strict=True):
        r = h.result(60)
        assert r.ids == ids
        assert r.finish_reason in ("length", "stop")
        # the runtime decodes every emitted token, as generate() does: same state, same logits
        np.testing.assert_array_equal(s.logits(), lg)
        assert s.history == s.history[: s.n_past] and len(s.history) == s.n_past
        s.close()
    model._engine.configure_runtime(RuntimeOptions())


def test_text_stop_strings_and_reasons_match_generate(model: geist.Model) -> None:
    text = "hello world, the quick brown fox"
    with model.session(max_seq_len=64) as a:
        list(a.generate(text, max_tokens=12, temperature=0.0))
        ref = a.last_result
        assert ref is not None
    stop = [ref.text[3:5]] if len(ref.text) > 5 else []
    with model.session(max_seq_len=64) as a:
        pieces = list(a.generate(text, max_tokens=12, stop=stop, temperature=0.0))
        ref_stop = a.last_result
        assert ref_stop is not None
    with model.session(max_seq_len=64) as b:
        r = b.submit(text, max_tokens=12, temperature=0.0).result(60)
        assert r.text == ref.text and r.ids == ref.ids
    with model.session(max_seq_len=64) as b:
        h = b.submit(text, max_tokens=12, stop=stop, temperature=0.0)
        streamed = list(h)
        r = h.result(60)
        assert r.text == ref_stop.text == "".join(p.text for p in pieces) == "".join(streamed)
        assert r.finish_reason == ("stop" if stop else ref_stop.finish_reason)


def test_capacity_and_errors(model: geist.Model) -> None:
    with model.session(max_seq_len=12) as s:
        r = s.submit(prompts(model, 1, 5)[0], max_tokens=50, temperature=0.0).result(60)
        assert r.finish_reason in ("capacity", "stop")
        if r.finish_reason == "capacity":
            assert s.n_past == 12
    with model.session(max_seq_len=8) as s:
        with pytest.raises(CapacityError):
            s.submit(prompts(model, 1, 9)[0], max_tokens=2).result(60)
        assert s.n_past == 0
        h = s.submit([1, 2, 3], max_tokens=40, temperature=0.0)
        with pytest.raises(StateError):
            s.submit([4], max_tokens=1)
        h.result(60)


def test_cancel_within_one_step_and_session_consistent(model: geist.Model) -> None:
    eng = model._engine
    # a slow runtime, so one step is long next to the event latency: the budget (0.01 ms per 2 ms)
    # is smaller than any step, so each step overdraws it and the runtime then pauses ~200x the
    # step's length; tokens come one at a time. (1 ms per 60 ms let fixture steps of ~0.2 ms run
    # in bursts of five, and the cancel after the third token seen came after the fifth made.)
    eng.configure_runtime(RuntimeOptions(budget_ms=0.01, period_ms=2.0))
    try:
        with model.session(max_seq_len=128) as s:
            h = s.submit(prompts(model, 1)[0], max_tokens=100, temperature=0.9, seed=3)
            seen = 0
            for _ in h:
                seen += 1
                if seen == 3:
                    h.cancel()
                    break
            r = h.result(30)
            assert r.finish_reason == "cancelled"
            assert len(r.ids) <= seen + 1
            # consistent: what the session holds replays to the same logits on a fresh one
            held = list(s.history)
            assert len(held) == s.n_past
            eng.configure_runtime(RuntimeOptions())
            r2 = s.submit([5, 6], max_tokens=2, temperature=0.0).result(30)
            with model.session(max_seq_len=128) as fresh:
                fresh.prefill([*held, 5, 6])
                tok = int(np.argmax(fresh.logits()))
                assert r2.ids[0] == tok or model.is_end_token(tok)
    finally:
        eng.configure_runtime(RuntimeOptions())


def test_cancel_inside_a_prompt_leaves_no_stale_logits(model: geist.Model) -> None:
    # A session with logits, then a request whose prompt runs over several steps (2 rows a step,
    # the slow runtime above), cancelled inside it: the session holds the prompt's first rows but
    # not logits after them, so it has none (the old logits were an earlier position's and a
    # request with an empty prompt sampled them).
    eng = model._engine
    prompt = prompts(model, 1, 40)[0]
    try:
        for attempt in range(5):
            eng.configure_runtime(RuntimeOptions(budget_ms=0.01, period_ms=2.0, prefill_chunk=2))
            with model.session(max_seq_len=128) as s:
                s.prefill([3, 4, 5])
                before = s.logits()
                h = s.submit(prompt, max_tokens=4, temperature=0.0)
                time.sleep(0.05 * (attempt + 1))
                h.cancel()
                assert h.result(30).finish_reason == "cancelled"
                eng.configure_runtime(RuntimeOptions())
                ran = s.n_past - 3
                if not 0 < ran < len(prompt):
                    continue  # the cancel came before the first step or after the prompt
                with pytest.raises(StateError):
                    s.logits()
                with pytest.raises(geist.errors.InvalidArgumentError, match="without logits"):
                    s.submit([], max_tokens=1).result(30)
                # and the session goes on from its rows as a fresh one would
                s.decode(prompt[ran])
                with model.session(max_seq_len=128) as fresh:
                    fresh.prefill([3, 4, 5, *prompt[: ran + 1]])
                    np.testing.assert_array_equal(s.logits(), fresh.logits())
                assert not np.array_equal(before, s.logits())
                return
        pytest.fail("the cancel never landed inside the prompt")
    finally:
        eng.configure_runtime(RuntimeOptions())


def test_priority_first_and_fair_progress(model: geist.Model) -> None:
    eng = model._engine
    eng.configure_runtime(RuntimeOptions(max_batch=1, budget_ms=1.0, period_ms=20.0))
    try:
        low = [model.session(max_seq_len=64) for _ in range(3)]
        hl = [s.submit([7, 8, 9], max_tokens=12, temperature=0.9, seed=i)
              for i, s in enumerate(low)]
        time.sleep(0.1)
        hi = model.session(max_seq_len=64)
        hh = hi.submit([3, 4], max_tokens=3, temperature=0.9, priority=5)
        rh = hh.result(60)
        done_low = sum(h.done for h in hl)
        assert done_low == 0, "a high-priority request waits for nobody"
        rl = [h.result(120) for h in hl]
        assert rh.finish_reason in ("length", "stop")
        # fair: every background request got its first token before any of them finished
        firsts = [r.first_token_s or 0.0 for r in rl]
        ends = [r.elapsed_s for r in rl if r.finish_reason == "length"]
        if ends:
            assert max(firsts) < min(ends)
        for s in [*low, hi]:
            s.close()
    finally:
        eng.configure_runtime(RuntimeOptions())


def test_close_session_and_engine_while_running(tmp_path: Path) -> None:
    path = testing.build_fixture(tmp_path / "m.gguf", arch="llama", weight_type="Q8_0", seed=2)
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(path, engine=eng)
    ss = [m.session(max_seq_len=256) for _ in range(4)]
    hs = [s.submit([1, 2, 3], max_tokens=200, temperature=0.9) for s in ss]
    ss[0].close()
    assert hs[0].result(30).finish_reason == "cancelled"
    m.close()  # closes the other sessions: their requests end
    for h in hs[1:]:
        assert h.result(30).finish_reason in ("cancelled", "length", "stop")
    eng.close()


def test_asyncio(model: geist.Model) -> None:
    async def main() -> list[tuple[str, str]]:
        sessions = [model.session(max_seq_len=64) for _ in range(3)]
        hs = [s.submit(p, max_tokens=6, temperature=0.0)
              for s, p in zip(sessions, prompts(model, 3), strict=True)]

        async def collect(h):  # type: ignore[no-untyped-def]
            parts = [p async for p in h.astream()]
            return "".join(parts), (await h.aresult()).text

        out = await asyncio.gather(*(collect(h) for h in hs))
        for s in sessions:
            s.close()
        return list(out)

    for streamed, text in asyncio.run(main()):
        assert streamed == text


@pytest.mark.slow
def test_smollm2_eight_sessions_equal_alone(smollm2_path: Path) -> None:
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(smollm2_path, engine=eng)
    words = ["cat", "dog", "sky", "king", "river", "moon", "tree", "city"]
    ps = [f"The {w} is" for w in words]
    alone = []
    for p in ps:
        with m.session(256) as s:
            list(s.generate(p, max_tokens=16, temperature=0.0))
            assert s.last_result is not None
            alone.append(s.last_result.ids)
    ss = [m.session(256) for _ in ps]
    hs = [s.submit(p, max_tokens=16, temperature=0.0) for s, p in zip(ss, ps, strict=True)]
    assert [h.result(120).ids for h in hs] == alone
    m.close()
    eng.close()


@pytest.mark.slow
def test_one_runtime_serves_a_small_then_a_bigger_model(tmp_path: Path, smollm2_path: Path) -> None:
    """The runtime's step scratch was sized by rows only: after a small model's steps, a bigger
    model's batched step wrote past its buffers (heap corruption, found by test order). Each
    model's step now gets buffers of its own geometry."""
    eng = geist.Engine(n_threads=2)
    small = testing.build_fixture(tmp_path / "g.gguf", arch="gemma3", weight_type="Q8_0", seed=9)
    with geist.Model.load(small, engine=eng) as m, m.session(max_seq_len=64) as s:
        s.submit([1, 2, 3, 4], max_tokens=4, temperature=0.0).result(60)
    with geist.Model.load(smollm2_path, engine=eng) as m:
        alone = []
        for p in ("The cat is", "The river is"):
            with m.session(128) as s:
                alone.append(s.generate(p, max_tokens=8, temperature=0.0).result().ids)
        ss = [m.session(128) for _ in range(2)]
        hs = [s.submit(p, max_tokens=8, temperature=0.0)
              for s, p in zip(ss, ("The cat is", "The river is"), strict=True)]
        assert [h.result(120).ids for h in hs] == alone
        for s in ss:
            s.close()
    eng.close()
