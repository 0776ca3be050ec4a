"""Session behaviour on fixture models: capacity errors, consistency of prefill/decode/eval,
concurrent sessions on threads, reset, KV modes, sizing from max_seq_len."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def fixture_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = testing.build_fixture(
        Path(tmp_path_factory.mktemp("fx")) / f"{request.param}.gguf",
        arch=request.param,
        weight_type="Q8_0",
        seed=3,
    )
    with geist.Model.load(path) as m:
        yield m


def random_ids(model: geist.Model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, model.n_vocab, n)]


def test_prefill_decode_and_eval_agree(fixture_model: geist.Model) -> None:
    ids = random_ids(fixture_model, 20)
    with fixture_model.session(max_seq_len=32, kv_mode="f32") as a:
        all_logits = a.eval(ids)
    with fixture_model.session(max_seq_len=32, kv_mode="f32") as b:
        b.prefill(ids[:7])
        np.testing.assert_allclose(b.logits(), all_logits[6], rtol=1e-5, atol=1e-5)
        for i in range(7, 20):
            b.decode(ids[i])
            np.testing.assert_allclose(b.logits(), all_logits[i], rtol=1e-5, atol=1e-5)
        assert b.n_past == 20


def test_prompt_over_cap_is_refused_and_session_stays_usable(fixture_model: geist.Model) -> None:
    ids = random_ids(fixture_model, 17, seed=1)
    with fixture_model.session(max_seq_len=16) as s:
        with pytest.raises(geist.CapacityError, match="max_seq_len 16"):
            s.prefill(ids)
        assert s.n_past == 0
        s.prefill(ids[:10])
        before = s.logits()
        with pytest.raises(geist.CapacityError):
            s.prefill(ids[:7])
        assert s.n_past == 10
        np.testing.assert_array_equal(s.logits(), before)
        s.prefill(ids[10:16])
        with pytest.raises(geist.CapacityError):
            s.decode(ids[0])
        assert s.n_past == 16
        after_errors = s.logits()
    # the refused calls changed nothing: same result as a session that never saw them
    np.testing.assert_allclose(after_errors, s_logits_after(fixture_model, ids[:16]), rtol=1e-5,
                               atol=1e-5)


def s_logits_after(model: geist.Model, ids: list[int]) -> np.ndarray:
    with model.session(max_seq_len=len(ids)) as s:
        s.prefill(ids)
        return s.logits()


def test_bad_token_and_state_errors(fixture_model: geist.Model) -> None:
    with fixture_model.session(max_seq_len=8) as s:
        with pytest.raises(geist.StateError):
            s.logits()
        with pytest.raises(geist.InvalidArgumentError, match="outside"):
            s.prefill([0, fixture_model.n_vocab])
        with pytest.raises(geist.InvalidArgumentError):
            s.prefill([-1])
        assert s.n_past == 0
    with pytest.raises(geist.InvalidArgumentError, match="max_seq_len"):
        fixture_model.session(max_seq_len=fixture_model.n_ctx_train + 1)
    with pytest.raises(geist.InvalidArgumentError):
        fixture_model.session(max_seq_len=0)


def test_reset_replays_identically(fixture_model: geist.Model) -> None:
    ids = random_ids(fixture_model, 12, seed=2)
    with fixture_model.session(max_seq_len=16) as s:
        first = s.eval(ids)
        s.reset()
        assert s.n_past == 0
        np.testing.assert_array_equal(s.eval(ids), first)


def test_sessions_on_threads_match_serial(fixture_model: geist.Model) -> None:
    seqs = [random_ids(fixture_model, 24, seed=10 + i) for i in range(4)]
    serial = []
    for ids in seqs:
        with fixture_model.session(max_seq_len=24) as s:
            serial.append(s.eval(ids))
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with fixture_model.session(max_seq_len=24) as s:
                for _ in range(3):
                    s.reset()
                    results[i] = s.eval(seqs[i])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        np.testing.assert_array_equal(results[i], serial[i])


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_f16_kv_close_to_f32(arch: str) -> None:
    # Exact float activations: with 8-bit activation rounding, the tiny f16 differences can flip
    # a rounding decision and the random fixture amplifies that step (see
    # tests/core/test_forward.py).
    engine = geist.Engine(backend="cpu_scalar", exact_activations=True)
    path = testing.fixture_path(arch=arch, weight_type="Q8_0", seed=3)
    with geist.Model.load(path, engine=engine) as model:
        ids = random_ids(model, 24, seed=4)
        with model.session(max_seq_len=24, kv_mode="f32") as a:
            la = a.eval(ids)
        with model.session(max_seq_len=24, kv_mode="f16") as b:
            lb = b.eval(ids)
    rel = np.linalg.norm(la - lb) / np.linalg.norm(la)
    assert 0 < rel < 5e-3  # f16 rounding of K/V only


def test_kv_sized_from_session_cap(fixture_model: geist.Model) -> None:
    info = fixture_model.info
    width = info["n_head_kv"] * (info["head_dim_k"] + info["head_dim_v"])
    for cap, mode, es in [(8, "f32", 4), (40, "f16", 2)]:
        with fixture_model.session(max_seq_len=cap, kv_mode=mode) as s:
            rows = 0
            for layer in range(info["n_layer"]):
                sliding = layer in info["sliding_layers"]
                rows += min(info["sliding_window"], cap) if sliding else cap
            assert s.memory()["kv_cache"] == rows * width * es


def test_sliding_window_ring_matches_full_prefix(tmp_path: Path) -> None:
    """Past the window, a ring-buffer session must equal a session that prefilled in one go
    (the reference test compares both against numpy)."""
    path = testing.build_fixture(tmp_path / "g.gguf", arch="gemma3", weight_type="F32", seed=5)
    with geist.Model.load(path) as m:
        window = m.info["sliding_window"]
        ids = random_ids(m, window * 3 + 5, seed=6)
        with m.session(max_seq_len=len(ids), kv_mode="f32") as a:
            full = a.eval(ids)
        with m.session(max_seq_len=len(ids), kv_mode="f32") as b:
            for i, t in enumerate(ids):
                b.decode(t)
                np.testing.assert_allclose(b.logits(), full[i], rtol=1e-4, atol=1e-4)


def test_native_handles_free_in_any_order(tmp_path: Path) -> None:
    """A game's teardown (or Python's garbage collector at exit) may free the engine, model,
    prefix and session in any order: the native core keeps what a live handle needs (reference
    counts) and frees the rest with the last handle. Under the ASan build this checks for
    use-after-free too."""
    import itertools

    from geist._binding import check, ffi, lib

    path = testing.build_fixture(tmp_path / "m.gguf", arch="gemma3", weight_type="Q8_0", seed=4)
    ids = ffi.new("int32_t[]", [5, 9, 17, 3])
    for order in itertools.permutations(["engine", "model", "prefix", "session"]):
        eng = ffi.new("geist_engine **")
        check(lib.geist_engine_create(ffi.NULL, eng))
        mod = ffi.new("geist_model **")
        check(lib.geist_model_load_file(eng[0], str(path).encode(), ffi.NULL, mod))
        pre = ffi.new("geist_prefix **")
        check(lib.geist_prefix_create(mod[0], ids, 2, 1, pre))
        opts = ffi.new("geist_session_options *")
        lib.geist_session_options_default(opts)
        opts.max_seq_len = 32
        ses = ffi.new("geist_session **")
        check(lib.geist_session_create_with_prefix(mod[0], pre[0], opts, ses))
        check(lib.geist_session_prefill(ses[0], ids + 2, 2))
        for what in order:
            if what == "engine":
                lib.geist_engine_free(eng[0])
            elif what == "model":
                lib.geist_model_free(mod[0])
            elif what == "prefix":
                lib.geist_prefix_free(pre[0])
            else:
                lib.geist_session_free(ses[0])
