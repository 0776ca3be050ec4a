"""cpu_x86 against cpu_scalar: kernels, fixtures, real models, thread-count determinism.

Products with quantized weights are integer block dots on activations quantized once per
product (act_quant.h), combined in the canonical float order of cpu_scalar/quants.c; cpu_x86
(AVX2 and AVX-512 VNNI) computes exactly that, so its results are bit-identical to cpu_scalar's;
these tests hold it to that (stronger than the 1e-3 acceptance). Both forced variants
("cpu_x86_avx2", "cpu_x86_avx512" = AVX-512 F/BW/VL/VNNI) are checked where the CPU has them; on
a CPU without AVX-512 VNNI those tests skip. vec_dot (float x, no activation quantization) keeps
cpu_scalar's float arithmetic on every backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

import geist
from geist.kernels import vec_dot
from tests.reference_data import reference_json

T = gguf.GGMLQuantizationType
VARIANTS = ["cpu_x86", "cpu_x86_avx2", "cpu_x86_avx512"]
TYPES = [T.F32, T.F16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K]


def _usable(backend: str) -> bool:
    try:
        vec_dot(int(T.F32), np.ones(1, np.float32).tobytes(), np.ones(1, np.float32), backend)
    except geist.GeistError:
        return False
    return True


def _require(backend: str) -> None:
    if not _usable(backend):
        pytest.skip(f"{backend} is not usable on this CPU (needs AVX2/FMA/F16C, or AVX-512)")


def _random_row(qtype: T, n: int, rng: np.random.Generator) -> bytes:
    """n values of qtype: quantized random normals, or random K blocks with small scales."""
    block, nbytes = (int(v) for v in gguf.GGML_QUANT_SIZES[qtype])
    if qtype in (T.Q4_K, T.Q6_K):
        raw = rng.integers(0, 256, size=(n // block, nbytes), dtype=np.uint8)
        scales = rng.uniform(1e-3, 2e-2, size=(n // block, 2)).astype(np.float16)
        if qtype == T.Q4_K:  # d, dmin at bytes 0..3
            raw[:, 0:4] = scales.view(np.uint8).reshape(-1, 4)
        else:  # d at byte 208
            raw[:, 208:210] = scales[:, :1].view(np.uint8).reshape(-1, 2)
        return raw.tobytes()
    data = rng.standard_normal(n).astype(np.float32)
    return bytes(gguf.quants.quantize(data, qtype).tobytes())


def _sizes(qtype: T) -> list[int]:
    block = int(gguf.GGML_QUANT_SIZES[qtype][0])
    if block == 1:
        return [1, 7, 15, 17, 255, 257, 1000, 2049]
    return [block * k for k in (1, 3, 7, 9, 13)]


@pytest.mark.parametrize("backend", VARIANTS)
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_vec_dot_matches_scalar(backend: str, qtype: T) -> None:
    _require(backend)
    rng = np.random.default_rng(int(qtype) * 7 + len(backend))
    for n in _sizes(qtype):
        row = _random_row(qtype, n, rng)
        x = rng.standard_normal(n).astype(np.float32)
        ref = vec_dot(int(qtype), row, x)
        got = vec_dot(int(qtype), row, x, backend)
        assert got == ref, (qtype.name, n, got, ref)


def test_backend_names_and_auto() -> None:
    names = geist.backends_available() if hasattr(geist, "backends_available") else None
    if names is not None:
        assert "cpu_x86" in names and "cpu_scalar" in names
    eng = geist.Engine()
    assert eng.backend == ("cpu_x86" if _usable("cpu_x86") else "cpu_scalar")


# -- whole forward passes ------------------------------------------------------------------------


def _greedy(
    path: Path,
    backend: str,
    n_threads: int,
    prompt: list[int],
    n_new: int,
    forced: list[int] | None = None,
) -> tuple[list[int], np.ndarray]:
    """Prefill, then n_new steps: greedy, or feeding `forced` (teacher forcing). Returns the
    fed ids and the logits after the prompt and after each step."""
    eng = geist.Engine(backend=backend, n_threads=n_threads)
    with (
        geist.Model.load(path, engine=eng) as model,
        model.session(max_seq_len=len(prompt) + n_new + 1) as s,
    ):
        s.prefill(prompt)
        logits = [s.logits()]
        ids = []
        for i in range(n_new):
            ids.append(s.step(None if forced is None else forced[i]))
            logits.append(s.logits())
    eng.close()
    return ids, np.stack(logits)


FIXTURES = [
    ("llama", "Q4_1"),
    ("llama", "Q4_0"),
    ("llama", "Q5_0"),
    ("llama", "Q8_0"),
    ("llama", "F16"),
    ("llama", "F32"),
    ("gemma3", "Q4_K"),
    ("gemma3", "Q6_K"),
]


@pytest.fixture(scope="module", params=FIXTURES, ids=lambda p: f"{p[0]}-{p[1]}")
def fixture_model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    testing = pytest.importorskip("geist.testing")
    arch, wtype = request.param
    path = tmp_path_factory.mktemp("x86") / f"{arch}-{wtype}.gguf"
    yield Path(testing.build_fixture(path, arch=arch, weight_type=wtype))


@pytest.mark.parametrize("backend", VARIANTS)
def test_fixture_matches_scalar(fixture_model: Path, backend: str) -> None:
    _require(backend)
    prompt = [int(v) for v in np.random.default_rng(3).integers(1, 300, 40)]
    ref_ids, ref_logits = _greedy(fixture_model, "cpu_scalar", 1, prompt, 16)
    ids, logits = _greedy(fixture_model, backend, 2, prompt, 16)
    assert ids == ref_ids
    assert np.array_equal(logits, ref_logits)


@pytest.mark.parametrize("backend", ["cpu_x86_avx2", "cpu_x86_avx512"])
def test_fixture_threads_bit_identical(fixture_model: Path, backend: str) -> None:
    _require(backend)
    prompt = [int(v) for v in np.random.default_rng(4).integers(1, 300, 37)]
    runs = [_greedy(fixture_model, backend, k, prompt, 6) for k in (1, 2, 3)]
    for ids, logits in runs[1:]:
        assert ids == runs[0][0]
        assert np.array_equal(logits, runs[0][1])


def test_scalar_threads_bit_identical(fixture_model: Path) -> None:
    prompt = [int(v) for v in np.random.default_rng(5).integers(1, 300, 35)]
    one = _greedy(fixture_model, "cpu_scalar", 1, prompt, 3)
    three = _greedy(fixture_model, "cpu_scalar", 3, prompt, 3)
    assert one[0] == three[0] and np.array_equal(one[1], three[1])


def test_concurrent_sessions_share_the_pool(tmp_path: Path) -> None:
    """Sessions on several Python threads, one engine: the same numbers as one at a time."""
    import threading

    testing = pytest.importorskip("geist.testing")
    _require("cpu_x86")
    path = Path(testing.build_fixture(tmp_path / "c.gguf", arch="llama", weight_type="Q4_1"))
    eng = geist.Engine(backend="cpu_x86", n_threads=3)
    prompts = [[int(v) for v in np.random.default_rng(i).integers(1, 300, 33)] for i in range(4)]
    with geist.Model.load(path, engine=eng) as model:

        def run(p: list[int]) -> np.ndarray:
            with model.session(max_seq_len=64) as s:
                s.prefill(p)
                for _ in range(4):
                    s.step()
                return s.logits()

        alone = [run(p) for p in prompts]
        together: list[np.ndarray | None] = [None] * len(prompts)

        def worker(i: int) -> None:
            together[i] = run(prompts[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for a, b in zip(alone, together, strict=True):
            assert b is not None and np.array_equal(a, b)
    eng.close()


# -- real models ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_real_model_matches_scalar(name: str) -> None:
    from geist import models

    _require("cpu_x86")
    path = models.get(name)
    ref = reference_json(name)
    for p in ref["prompts"]:
        prompt = [int(v) for v in p["prompt_ids"]]
        ref_ids, ref_logits = _greedy(path, "cpu_scalar", 2, prompt, 64)
        ids, logits = _greedy(path, "cpu_x86", 2, prompt, 64)
        assert ids == ref_ids, p["text"]
        assert np.array_equal(logits, ref_logits), p["text"]


# -- integer block-dot kernels (native/tests/test_backend_q.c) -----------------------------------


def test_integer_kernels_bit_identical_native() -> None:
    """AVX2 and AVX-512 VNNI kernels vs cpu_scalar's canonical arithmetic at odd sizes, row splits
    and token tails; cpu_scalar vs the float64 dot; vectorized activation quantization bytes."""
    import subprocess

    exe = Path(__file__).resolve().parents[2] / "build" / "release" / "tests" / "test_backend_q"
    if not exe.exists():
        pytest.skip("native tests not built (scons)")
    _require("cpu_x86")
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 failures" in res.stdout
    if _usable("cpu_x86_avx512"):
        assert "cpu_x86_avx512: tested" in res.stdout
