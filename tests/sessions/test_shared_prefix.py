"""Shared prefixes: one persona KV read in place by many sessions; each session's output equals
a session that computed the prefix itself; the prefix is resident (and reported) once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import geist
from geist import plan, testing
from tests.memory_isolated import run_isolated
from tests.memory_utils import pin_malloc_thresholds, rss_bytes

MODES = ["f32", "f16", "int8", "int4", "kivi2"]


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def fixture_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("pf")) / f"{request.param}.gguf",
                                 arch=request.param, weight_type="Q8_0", seed=31)
    with geist.Model.load(path) as m:
        yield m


def random_ids(model: geist.Model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, model.n_vocab, n)]


@pytest.mark.parametrize("mode", MODES)
def test_session_on_prefix_equals_self_computed(fixture_model: geist.Model, mode: str) -> None:
    persona = random_ids(fixture_model, 64, seed=1)  # a whole number of KIVI blocks
    user = random_ids(fixture_model, 11, seed=2)
    with fixture_model.session(max_seq_len=128, kv_mode=mode) as own:
        own.prefill(persona)
        persona_logits = own.logits()
        own.prefill(user)
        want = [own.step() for _ in range(20)]
        want_logits = own.logits()
    with fixture_model.prefix(persona, kv_mode=mode) as pre:
        s = fixture_model.session(max_seq_len=128, kv_mode=mode, prefix=pre)
    # the prefix lives on while a session uses it, even after close()
    assert s.n_past == 64 and s.history == persona
    np.testing.assert_array_equal(s.logits(), persona_logits)
    s.prefill(user)
    assert [s.step() for _ in range(20)] == want
    np.testing.assert_array_equal(s.logits(), want_logits)
    s.reset()  # back to just after the prefix
    assert s.n_past == 64
    np.testing.assert_array_equal(s.logits(), persona_logits)
    s.close()


def test_prefix_sessions_are_independent_and_cap_counts_the_prefix(
        fixture_model: geist.Model) -> None:
    persona = random_ids(fixture_model, 20, seed=3)
    pre = fixture_model.prefix(persona)
    a = fixture_model.session(max_seq_len=30, prefix=pre)
    b = fixture_model.session(max_seq_len=30, prefix=pre)
    a.prefill(random_ids(fixture_model, 5, seed=4))
    with pytest.raises(geist.CapacityError):
        b.prefill(random_ids(fixture_model, 11, seed=5))
    b.prefill(random_ids(fixture_model, 10, seed=5))
    assert a.n_past == 25 and b.n_past == 30
    # own KV holds only the 10 positions after the prefix
    g = plan.Geometry(*(fixture_model.info[k] for k in (
        "n_layer", "n_head_kv", "head_dim_k", "head_dim_v", "n_vocab", "n_ctx_train",
        "sliding_window")), tuple(fixture_model.info["sliding_layers"]))
    assert a.memory()["kv_cache"] == plan.kv_bytes(g, 10, "f16")
    assert a.memory()["shared_prefix"] == pre.memory()["shared_prefix"] == plan.kv_bytes(
        g, 20, "f16")
    with pytest.raises(geist.GeistError):
        fixture_model.session(max_seq_len=20, prefix=pre)  # no room after the prefix
    # snapshots of prefix sessions restore onto the same prefix only
    image = a.snapshot()
    want = [a.step() for _ in range(3)]
    fork_b = b.fork()
    b.truncate(20)
    b.restore(image)
    assert [b.step() for _ in range(3)] == want
    with fixture_model.session(max_seq_len=30) as plain:
        with pytest.raises(geist.GeistError, match="prefix"):
            plain.restore(image)
    with pytest.raises(geist.GeistError):
        b.truncate(19)  # cannot rewind into the shared prefix
    fork_b.close()
    for s in (a, b):
        s.close()
    pre.close()


def test_engine_memory_counts_the_prefix_once(fixture_model: geist.Model) -> None:
    engine = fixture_model._engine
    base = engine.memory()
    pre = fixture_model.prefix(random_ids(fixture_model, 24, seed=6))
    sessions = [fixture_model.session(max_seq_len=40, prefix=pre) for _ in range(4)]
    mem = engine.memory()
    assert mem["shared_prefix"] - base.get("shared_prefix", 0) == pre.memory()["shared_prefix"]
    assert mem["kv_cache"] - base["kv_cache"] == sum(s.memory()["kv_cache"] for s in sessions)
    for s in sessions:
        s.close()
    pre.close()


@pytest.mark.slow
def test_32_gemma_npcs_share_one_persona(gemma3_path: Path) -> None:
    """32 sessions, cap 256, on a 128-token persona: the persona KV is resident once."""
    run_isolated(__name__, "npcs_share_one_persona", str(gemma3_path))


def npcs_share_one_persona(gemma3_path: str) -> None:
    from tests.reference_data import reference_json

    pin_malloc_thresholds()
    ref = reference_json("gemma3")
    persona = [t for p in ref["prompts"] for t in p["prompt_ids"] + p["greedy_ids"]][:128]
    assert len(persona) == 128
    mode = "f16"
    with geist.Model.load(gemma3_path) as m:
        with m.session(max_seq_len=16) as warm:
            warm.prefill(persona[:4])
        before = rss_bytes()
        pre = m.prefix(persona, kv_mode=mode)
        after_prefix = rss_bytes()
        sessions = [m.session(max_seq_len=256, kv_mode=mode, prefix=pre) for _ in range(32)]
        after = rss_bytes()
        prefix_bytes = pre.memory()["shared_prefix"]
        per = sessions[0].memory()
        own = per["kv_cache"] + per["scratch"] + per["other"]
        reported = pre.memory()["total_owned"] + prefix_bytes + 32 * own
        measured = after - before
        print(f"persona KV {prefix_bytes / 2**20:.2f} MiB (resident once; measured prefix step "
              f"{(after_prefix - before) / 2**20:.2f} MiB); 32 sessions own "
              f"{32 * own / 2**20:.2f} MiB; reported total {reported / 2**20:.2f} MiB, "
              f"measured {measured / 2**20:.2f} MiB; 32 private copies would add "
              f"{31 * prefix_bytes / 2**20:.2f} MiB")
        assert abs(measured - reported) <= 0.10 * reported
        assert measured < reported + 4 * prefix_bytes  # not 32 copies
        # the shared-prefix session decodes like one that computed the persona itself
        user = ref["prompts"][0]["prompt_ids"][:10]
        with m.session(max_seq_len=256, kv_mode=mode) as own_s:
            own_s.prefill(persona + user)
            want = [own_s.step() for _ in range(8)]
        sessions[0].prefill(user)
        assert [sessions[0].step() for _ in range(8)] == want
        for s in sessions:
            s.close()
        pre.close()
