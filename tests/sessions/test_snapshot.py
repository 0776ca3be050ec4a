"""Session snapshots, restore, fork and truncate: bit-identical continuation in every KV mode,
images holding only the used rows, and every bad image refused with the session unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing

MODES = ["f32", "f16", "int8", "int4", "kivi2"]


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def fixture_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("snap")) / f"{request.param}.gguf",
                                 arch=request.param, weight_type="Q8_0", seed=21)
    with geist.Model.load(path) as m:
        yield m


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory):
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("other")) / "o.gguf",
                                 arch="llama", weight_type="Q8_0", seed=99)
    with geist.Model.load(path) as m:
        yield m


def random_ids(model: geist.Model, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, model.n_vocab, n)]


def continue_greedy(s: geist.Session, n: int) -> tuple[list[int], np.ndarray]:
    out = [s.step() for _ in range(n)]
    return out, s.logits()


@pytest.mark.parametrize("mode", MODES)
def test_restore_and_fork_continue_bit_identically(fixture_model: geist.Model, mode: str) -> None:
    ids = random_ids(fixture_model, 45, seed=1)
    with fixture_model.session(max_seq_len=128, kv_mode=mode) as a:
        a.prefill(ids)
        a.step()
        image = a.snapshot()
        fork = a.fork()
        want, want_logits = continue_greedy(a, 32)
        history = list(a.history)
    with fixture_model.session(max_seq_len=128, kv_mode=mode) as b:
        b.prefill(random_ids(fixture_model, 7, seed=2))  # some other state first
        b.restore(image)
        assert b.n_past == 46 and b.history == history[:46]
        got, got_logits = continue_greedy(b, 32)
        assert got == want
        np.testing.assert_array_equal(got_logits, want_logits)
        assert b.history == history
    with fork:
        assert fork.history == history[:46]
        got, got_logits = continue_greedy(fork, 32)
        assert got == want
        np.testing.assert_array_equal(got_logits, want_logits)


@pytest.mark.parametrize("mode", MODES)
def test_restore_into_a_session_of_another_cap(fixture_model: geist.Model, mode: str) -> None:
    """Rows are stored by position, so a session with another cap (another ring layout past the
    window) continues the same way."""
    ids = random_ids(fixture_model, 70, seed=3)
    with fixture_model.session(max_seq_len=200, kv_mode=mode) as a:
        a.prefill(ids)
        image = a.snapshot()
        want, _ = continue_greedy(a, 20)
    with fixture_model.session(max_seq_len=90, kv_mode=mode) as b:
        b.restore(image)
        assert continue_greedy(b, 20)[0] == want


@pytest.mark.parametrize("mode", MODES)
def test_image_holds_used_rows_only(fixture_model: geist.Model, mode: str) -> None:
    ids = random_ids(fixture_model, 100, seed=4)
    with fixture_model.session(max_seq_len=256, kv_mode=mode) as full_cap:
        full_cap.prefill(ids)
        size_256 = len(full_cap.snapshot())
    with fixture_model.session(max_seq_len=100, kv_mode=mode) as tight:
        tight.prefill(ids)
        size_100 = len(tight.snapshot())
        kv_100 = tight.memory()["kv_cache"]
    assert size_256 == size_100  # the cap does not matter, only the used rows
    logits = 4 * fixture_model.n_vocab
    assert size_100 - logits <= 1.1 * kv_100 + 2048


def assert_refused(s: geist.Session, image: bytes, exc: type[Exception], match: str,
                   want: list[int]) -> None:
    with pytest.raises(exc, match=match):
        s.restore(image)
    probe = s.fork()
    assert continue_greedy(probe, 4)[0] == want
    probe.close()


@pytest.mark.parametrize("mode", ["f16", "int4", "kivi2"])
def test_bad_images_are_refused_and_change_nothing(fixture_model: geist.Model,
                                                   other_model: geist.Model, mode: str) -> None:
    ids = random_ids(fixture_model, 40, seed=5)
    with fixture_model.session(max_seq_len=64, kv_mode=mode) as src:
        src.prefill(ids)
        image = src.snapshot()
    with fixture_model.session(max_seq_len=64, kv_mode=mode) as s:
        s.prefill(random_ids(fixture_model, 9, seed=6))
        probe = s.fork()
        want = continue_greedy(probe, 4)[0]
        probe.close()
        history = list(s.history)

        with other_model.session(max_seq_len=64, kv_mode=mode) as o:
            o.prefill(random_ids(other_model, 40, seed=5))
            assert_refused(s, o.snapshot(), geist.GeistError, "another model", want)
        other_mode = "f32" if mode != "f32" else "f16"
        with fixture_model.session(max_seq_len=64, kv_mode=other_mode) as o:
            o.prefill(ids)
            assert_refused(s, o.snapshot(), geist.GeistError, "KV mode", want)
        with fixture_model.session(max_seq_len=30, kv_mode=mode) as short:
            with pytest.raises(geist.CapacityError, match="max_seq_len 30"):
                short.restore(image)
            assert short.n_past == 0
        for cut in np.linspace(0, len(image) - 1, 10).astype(int):
            assert_refused(s, image[:cut], geist.GeistError, "snapshot", want)
        rng = np.random.default_rng(7)
        for at in [8, 40, len(image) // 2, len(image) - 3, int(rng.integers(0, len(image)))]:
            bad = bytearray(image)
            bad[at] ^= 0x10
            assert_refused(s, bytes(bad), geist.GeistError, "snapshot|model", want)
        assert s.history == history and s.n_past == 9
        s.restore(image)  # and the good one still works
        assert s.n_past == 40


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def wide_window_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The gemma fixture with a window of 48: rewinding 8 tokens stays inside the ring."""
    sizes = {"sliding_window": 48} if request.param == "gemma3" else {}
    path = testing.build_fixture(Path(tmp_path_factory.mktemp("ww")) / f"{request.param}.gguf",
                                 arch=request.param, weight_type="Q8_0", seed=22, **sizes)
    with geist.Model.load(path) as m:
        yield m


@pytest.mark.parametrize("mode", MODES)
def test_truncate_rewinds(wide_window_model: geist.Model, mode: str) -> None:
    fixture_model = wide_window_model
    ids = random_ids(fixture_model, 40, seed=8)
    tail = random_ids(fixture_model, 10, seed=9)
    keep = 32  # a KIVI block boundary: rewinding there is exact in every mode
    with fixture_model.session(max_seq_len=64, kv_mode=mode) as fresh:
        fresh.prefill(ids[:keep] + tail)
        want = fresh.logits()
    with fixture_model.session(max_seq_len=64, kv_mode=mode) as s:
        s.prefill(ids)
        s.truncate(keep)
        assert s.n_past == keep and s.history == ids[:keep]
        with pytest.raises(geist.StateError):
            s.logits()
        s.prefill(tail)
        np.testing.assert_array_equal(s.logits(), want)
        with pytest.raises(geist.GeistError):
            s.truncate(s.n_past + 1)
        s.truncate(5)  # inside a KIVI block (lossy there), still usable
        s.prefill(tail)
        assert np.isfinite(s.logits()).all()


def test_truncate_refused_when_the_ring_lost_rows(tmp_path: Path) -> None:
    path = testing.build_fixture(tmp_path / "g.gguf", arch="gemma3", weight_type="Q8_0", seed=1)
    with geist.Model.load(path) as m:
        window = m.info["sliding_window"]
        with m.session(max_seq_len=64, kv_mode="f16") as s:
            s.prefill(random_ids(m, 40, seed=1))
            with pytest.raises(geist.GeistError, match="ring"):
                s.truncate(40 - window - 2)
            assert s.n_past == 40
            s.truncate(39)  # the newest rows are still there
            assert s.n_past == 39


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_gemma_snapshot_restore_32_tokens(gemma3_path: Path, mode: str) -> None:
    from tests.reference_data import reference_json

    ids = [t for p in reference_json("gemma3")["prompts"] for t in p["prompt_ids"]][:100]
    assert len(ids) == 100
    with geist.Model.load(gemma3_path) as m:
        with m.session(max_seq_len=1024, kv_mode=mode) as a:
            a.prefill(ids)
            image = a.snapshot()
            cap_kv = a.memory()["kv_cache"]
            want = [a.step() for _ in range(32)]
        with m.session(max_seq_len=1024, kv_mode=mode) as b:
            b.restore(image)
            assert [b.step() for _ in range(32)] == want
        logits = 4 * m.n_vocab
        info = m.info
        row = info["n_layer"] * info["n_head_kv"] * (info["head_dim_k"] + info["head_dim_v"])
        kv_100 = 100 * row * {"f32": 4, "f16": 2, "int8": 1.016, "int4": 0.5625,
                              "kivi2": 0.375}[mode]
        kv_image = (len(image) - logits) / 2**20
        print(f"{mode}: image for 100 tokens {len(image)} bytes ({kv_image:.3f}"
              f" MiB of KV + {logits / 2**20:.2f} MiB logits); 100 rows of the cache "
              f"~{kv_100 / 2**20:.3f} MiB; the cap-1024 cache {cap_kv / 2**20:.3f} MiB")
        # about 100 rows (KIVI: + its F16 residual of the newest 4 tokens), not the cap
        assert len(image) - logits < 1.05 * kv_100 + 80_000
        assert len(image) - logits < 0.25 * cap_kv
