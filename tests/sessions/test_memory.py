"""Memory contract on the real Gemma 3 file (context length 32768): KV sized from the session's
cap, measured RSS equal to the reported bytes, and zero-copy loading from the caller's buffer."""

from __future__ import annotations

import hashlib
import mmap
from pathlib import Path

import numpy as np
import pytest

import geist
from tests.memory_isolated import run_isolated
from tests.memory_utils import pin_malloc_thresholds, rss_bytes, status_bytes

pytestmark = pytest.mark.slow


def greedy(session: geist.Session, prompt: list[int], n: int) -> list[int]:
    session.prefill(prompt)
    return [session.step() for _ in range(n)]


# RSS deltas are measured in a fresh interpreter (memory_isolated.py): inside a long pytest
# process, blocks freed by earlier tests absorb the new allocations and the deltas read ~0.


@pytest.mark.parametrize("kv_mode", ["f32", "f16"])
def test_kv_sized_from_session_cap_not_model_context(gemma3_path: Path, kv_mode: str) -> None:
    run_isolated(__name__, "kv_cap_check", str(gemma3_path), kv_mode)


def test_from_buffer_is_zero_copy(gemma3_path: Path) -> None:
    run_isolated(__name__, "zero_copy_check", str(gemma3_path))


# "The capital of France is" in Gemma's tokens, as llama.cpp tokenized it (reference prompt 0)
GEMMA_PROMPT = [2, 818, 5279, 529, 7001, 563]


def kv_cap_check(path: str, kv_mode: str) -> None:
    pin_malloc_thresholds()
    prompt = GEMMA_PROMPT
    with geist.Model.load(path) as model:
        assert model.n_ctx_train == 32768
        # warm up code paths and the model's pages once, so later deltas are sessions only
        with model.session(max_seq_len=16, kv_mode=kv_mode) as warm:
            greedy(warm, prompt, 2)

        before = rss_bytes()
        small = model.session(max_seq_len=64, kv_mode=kv_mode)
        small_delta = rss_bytes() - before
        small_report = small.memory()

        before = rss_bytes()
        big = model.session(max_seq_len=32768, kv_mode=kv_mode)
        big_delta = rss_bytes() - before
        big_report = big.memory()

        print(f"{kv_mode}: session(64) adds {small_delta / 2**20:.2f} MiB "
              f"(reports kv {small_report['kv_cache'] / 2**20:.2f} MiB), session(32768) adds "
              f"{big_delta / 2**20:.2f} MiB (reports kv {big_report['kv_cache'] / 2**20:.2f} MiB)")
        assert small_delta < big_delta / 8
        reported_big = big_report["kv_cache"] + big_report["scratch"] + big_report["other"]
        assert abs(big_delta - reported_big) <= 0.10 * reported_big
        # the small session is dominated by its logits row and page rounding; allow 1 MiB
        reported_small = small_report["kv_cache"] + small_report["scratch"]
        assert small_delta <= reported_small + 2**20

        assert greedy(small, prompt, 8) == greedy(big, prompt, 8)

        small.reset()
        with pytest.raises(geist.CapacityError, match="max_seq_len 64"):
            small.prefill([prompt[0]] * 65)
        assert small.n_past == 0
        assert greedy(small, prompt, 8) == greedy_fresh(model, prompt, kv_mode)
        small.close()
        big.close()


def greedy_fresh(model: geist.Model, prompt: list[int], kv_mode: str) -> list[int]:
    with model.session(max_seq_len=64, kv_mode=kv_mode) as s:
        return greedy(s, prompt, 8)


def zero_copy_check(path: str) -> None:
    pin_malloc_thresholds()
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)  # a write would fault
    digest = hashlib.sha256(buf).hexdigest()  # also makes every page of the buffer resident
    before = rss_bytes()
    model = geist.Model.from_buffer(buf)
    mem = model.memory()
    owned = mem["total_owned"]
    grown = rss_bytes() - before
    print(f"owned {owned} bytes = {100 * owned / size:.3f}% of the file; RSS grew "
          f"{grown / 2**20:.2f} MiB = {100 * grown / size:.3f}% of the file")
    assert mem["weights_aliased"] > 0.95 * size
    assert mem["weights_owned"] == 0
    assert owned < 0.02 * size
    assert grown < 0.02 * size
    with model.session(max_seq_len=32) as s:
        s.prefill([2, 818, 5279])
        assert np.isfinite(s.logits()).all()
    model.close()
    assert hashlib.sha256(buf).hexdigest() == digest
    buf.close()


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_bench_peak_rss_from_memory(which: str, request: pytest.FixtureRequest) -> None:
    """Issue 4's bound: loading from the game's buffer, the bench's work (one session of 256,
    prefill 128, decode 64) peaks within file size + KV + 16 MiB above the process baseline."""
    path = request.getfixturevalue(f"{which}_path")
    run_isolated(__name__, "bench_peak_check", str(path))


def bench_peak_check(path: str) -> None:
    size = Path(path).stat().st_size
    rng = np.random.default_rng(0)
    engine = geist.Engine(n_threads=2)
    base = status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) restarts from the current RSS
    with open(path, "rb") as f:
        buf = f.read()  # the game's copy of the file: resident, read-only to geist
    model = geist.Model.from_buffer(buf, engine=engine)
    with model.session(max_seq_len=256) as s:
        s.prefill([int(x) for x in rng.integers(0, model.n_vocab, 128)])
        for _ in range(64):
            s.step()
        kv = s.memory()["kv_cache"]
    peak = status_bytes("VmHWM") - base
    bound = size + kv + 16 * 2**20
    print(f"peak above baseline {peak / 2**20:.1f} MiB; file {size / 2**20:.1f} MiB + KV "
          f"{kv / 2**20:.2f} MiB + 16 MiB = {bound / 2**20:.1f} MiB")
    model.close()
    assert peak <= bound


def test_from_buffer_keeps_bytes_alive(smollm2_path: Path) -> None:
    data = smollm2_path.read_bytes()
    model = geist.Model.from_buffer(data)
    del data  # the model holds the only reference now
    with model.session(max_seq_len=8) as s:
        s.prefill([504, 3575])
        assert int(np.argmax(s.logits())) >= 0
    model.close()


def test_load_file_counts_its_mapping(smollm2_path: Path) -> None:
    with geist.Model.load(smollm2_path) as model:
        mem = model.memory()
        assert mem["mapped_file"] == smollm2_path.stat().st_size
        assert mem["weights_owned"] == 0
