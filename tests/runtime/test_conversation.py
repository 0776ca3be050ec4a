"""The conversation policy and the generation loop in the core (chat/, gen/): one loop behind
Session.generate, Session.chat and Session.submit; finished text equal to the streamed pieces;
KV reuse across turns; trimming that keeps the persona and room for the reply."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing
from geist.generate import ContextPolicy

PERSONA = "You are Brom, the village blacksmith. Answer in one short sentence."
LINES = ["Can you fix my sword?", "How much will it cost?", "Do you have any shields?",
         "Where can I find iron ore?", "Who lives in the castle?", "Is the forest dangerous?",
         "What is your favourite tool?", "Have you seen a dragon?", "Can I sleep here tonight?",
         "Do you know the innkeeper?"]


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def fixture_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    # gemma3's window as wide as the caps here, so rewinds stay inside its rings (the refused
    # rewind of a narrow ring has its own test below)
    extra = {"sliding_window": 256} if request.param == "gemma3" else {}
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("conv")) / f"{request.param}.gguf",
                                 arch=request.param, weight_type="Q8_0", seed=9, **extra)
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(path, engine=eng)
    yield m
    m.close()
    eng.close()


def test_finished_text_is_the_streamed_pieces_even_when_text_was_held_back(
        fixture_model: geist.Model) -> None:
    """A reply ending inside a possible stop string: the held-back tail is dropped from both
    the stream and the finished text (it used to stay in `finished` only)."""
    rng = np.random.default_rng(4)
    checked = 0
    for trial in range(12):
        prompt = [int(x) for x in rng.integers(1, fixture_model.n_vocab, 6)]
        with fixture_model.session(max_seq_len=64) as s:
            ref = s.generate(prompt, max_tokens=8, temperature=0.0).result()
        if len(ref.text) < 3:
            continue
        tail = ref.text[-2:]
        with fixture_model.session(max_seq_len=64) as s:
            gen = s.generate(prompt, max_tokens=8, temperature=0.0, stop=[tail + "\x01never"])
            streamed = "".join(p.text for p in gen)
            res = gen.result()
        assert res.text == streamed, trial
        assert res.finish_reason == ref.finish_reason
        assert ref.text.startswith(res.text) and len(res.text) <= len(ref.text) - 1
        # and through submit (the async path) the same
        with fixture_model.session(max_seq_len=64) as s:
            h = s.submit(prompt, max_tokens=8, temperature=0.0, stop=[tail + "\x01never"])
            assert "".join(h) == h.result(30).text == res.text
        checked += 1
    assert checked >= 4


def test_generate_chat_and_submit_are_one_loop(fixture_model: geist.Model) -> None:
    msgs = [{"role": "system", "content": PERSONA}, {"role": "user", "content": LINES[0]}]
    with fixture_model.session(max_seq_len=256, seed=5) as a:
        ra = a.chat(msgs, max_tokens=10, temperature=0.9).result()
    with fixture_model.session(max_seq_len=256, seed=5) as b:
        rb = b.submit(msgs, max_tokens=10, temperature=0.9).result(30)
    assert (ra.ids, ra.text, ra.finish_reason) == (rb.ids, rb.text, rb.finish_reason)
    assert ra.n_reused == 0 and ra.n_prompt > 0 and ra.n_dropped == 0


def test_second_turn_prefills_only_the_new_tokens(fixture_model: geist.Model) -> None:
    msgs = [{"role": "system", "content": PERSONA}, {"role": "user", "content": LINES[0]}]
    with fixture_model.session(max_seq_len=256) as s:
        r1 = s.chat(msgs, max_tokens=6, temperature=0.0).result()
        held = s.n_past
        msgs += [{"role": "assistant", "content": r1.text},
                 {"role": "user", "content": LINES[1]}]
        r2 = s.chat(msgs, max_tokens=6, temperature=0.0).result()
        full = fixture_model.tokenize(fixture_model.chat_template(msgs), add_special=True,
                                      parse_special=True)
        assert r2.n_reused + r2.n_prompt == len(full)
        # the first turn's prompt is kept but for its last few tokens: the generation prompt's
        # end ("model\n") may tokenize differently once the reply's text follows it
        assert r2.n_reused >= r1.n_prompt - 8
        assert r2.n_prompt < len(full) - r1.n_prompt + 8 + len(r1.ids)
        assert r2.n_reused <= held
        assert s.history[: len(full)] == full


def test_a_rewind_the_ring_refuses_starts_over(tmp_path: Path) -> None:
    """Gemma's fixture has a sliding window of 8: rewinding a longer session into its ring is
    refused, so the core starts over; the reply is the one a fresh session gives."""
    path = testing.build_fixture(tmp_path / "g.gguf", arch="gemma3", weight_type="Q8_0", seed=9)
    with geist.Model.load(path) as m:
        msgs = [{"role": "system", "content": PERSONA}, {"role": "user", "content": LINES[0]}]
        with m.session(max_seq_len=256) as s:
            r1 = s.chat(msgs, max_tokens=6, temperature=0.0).result()
            msgs += [{"role": "assistant", "content": r1.text + " (edited)"},
                     {"role": "user", "content": LINES[1]}]
            r2 = s.chat(msgs, max_tokens=6, temperature=0.0).result()
            assert r2.n_reused == 0
        with m.session(max_seq_len=256) as fresh:
            r3 = fresh.chat(msgs, max_tokens=6, temperature=0.0).result()
        assert (r2.ids, r2.text, r2.n_prompt) == (r3.ids, r3.text, r3.n_prompt)


def test_trimming_keeps_the_persona_and_room_for_the_reply(fixture_model: geist.Model) -> None:
    cap, max_tokens = 160, 16
    persona = fixture_model.tokenize(fixture_model.chat_template(
        [{"role": "system", "content": PERSONA}], add_generation_prompt=False),
        add_special=True, parse_special=True)
    msgs = [{"role": "system", "content": PERSONA}]
    dropped_seen = 0
    with fixture_model.session(max_seq_len=cap) as s:
        for turn in range(14):
            msgs.append({"role": "user", "content": LINES[turn % len(LINES)]})
            r = s.chat(msgs, max_tokens=max_tokens, temperature=0.0).result()
            total = r.n_reused + r.n_prompt
            assert total + min(max_tokens, cap // 2) <= cap, (turn, total)
            assert r.finish_reason != "capacity"
            assert s.history[: len(persona) - 1] == persona[:-1]  # the persona stays first
            dropped_seen = max(dropped_seen, r.n_dropped)
            msgs.append({"role": "assistant", "content": r.text})
    assert dropped_seen > 0


def test_no_trim_fails_with_capacity_and_leaves_the_session(fixture_model: geist.Model) -> None:
    msgs = [{"role": "system", "content": PERSONA * 4}, {"role": "user", "content": LINES[0]}]
    with fixture_model.session(max_seq_len=24) as s:
        s.prefill([1, 2, 3])
        with pytest.raises(geist.CapacityError):
            s.chat(msgs, max_tokens=4, context=ContextPolicy(trim=False)).result()
        assert s.history == [1, 2, 3]


def test_bad_policy_and_messages_are_clear_errors(fixture_model: geist.Model) -> None:
    with fixture_model.session(max_seq_len=64) as s:
        with pytest.raises(geist.InvalidArgumentError, match="keep_last"):
            s.chat([{"role": "user", "content": "hi"}],
                   context=ContextPolicy(keep_last=-2)).result()
        with pytest.raises(geist.GeistError, match="role"):
            s.chat([{"content": "hi"}])
        assert s.n_past == 0


@pytest.mark.slow
def test_thirty_turns_at_cap_256_on_smollm2(smollm2_path: Path) -> None:
    """The issue's case: a 30-turn conversation at cap 256 keeps the persona, drops the oldest
    turns and replies; turns without a new trim prefill only the new tokens."""
    eng = geist.Engine(n_threads=2)
    with geist.Model.load(smollm2_path, engine=eng) as m, m.session(max_seq_len=256) as s:
        persona = m.tokenize(m.chat_template([{"role": "system", "content": PERSONA}],
                                             add_generation_prompt=False),
                             add_special=True, parse_special=True)
        msgs = [{"role": "system", "content": PERSONA}]
        prev_dropped, reuse_turns, trims = 0, 0, 0
        for turn in range(30):
            msgs.append({"role": "user", "content": LINES[turn % len(LINES)]})
            r = s.chat(msgs, max_tokens=24, temperature=0.0).result()
            assert r.text.strip(), turn
            assert r.finish_reason in ("stop", "length")
            assert s.history[: len(persona) - 1] == persona[:-1]
            new_line = len(m.tokenize(LINES[turn % len(LINES)], add_special=False))
            if turn > 0 and r.n_dropped == prev_dropped:
                # only this turn's tokens: the player's line, the template's markers around it,
                # and the previous reply as re-tokenized (at most its 24 tokens + markers)
                assert r.n_prompt <= new_line + 24 + 12, (turn, r.n_prompt)
                reuse_turns += 1
            elif turn > 0:
                trims += 1
            prev_dropped = r.n_dropped
            msgs.append({"role": "assistant", "content": r.text})
        assert prev_dropped > 0
        assert reuse_turns >= 2 * trims, (reuse_turns, trims)
    eng.close()
