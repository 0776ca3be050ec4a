"""geist.testing fixtures: they build for every arch and weight type, read back as written, and
geist.reference runs on them with sane logits; plus reference properties (causality, window)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from geist import testing
from geist.reference import ReferenceModel, _rope, open_gguf

# Relative RMS error of quantize -> dequantize on N(0, 1) rows, with headroom.
ROUNDTRIP_TOL = {
    "F32": 1e-7, "F16": 1e-3, "BF16": 5e-3, "Q8_0": 0.01, "Q6_K": 0.03, "Q5_0": 0.06,
    "Q5_1": 0.05, "Q4_0": 0.12, "Q4_1": 0.1, "Q4_K": 0.1, "Q5_K": 0.05, "IQ4_NL": 0.1,
    "IQ4_XS": 0.1,
    # testing.py's simple quantizers for 3 and 2 bits (no scale search, as llama.cpp does): on
    # N(0, 1) rows they measure 0.15-0.19 (Q3_K) and 0.14-0.34 (Q2_K)
    "Q3_K": 0.22, "Q2_K": 0.4,
}  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fixtures")


@pytest.mark.parametrize("wtype", testing.WEIGHT_TYPES)
def test_quantize_roundtrip(wtype: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 512)).astype(np.float32)
    x[1] *= 1e-3  # tiny scale
    x[2] = np.abs(x[2]) + 2.0  # all positive, offset from zero
    x[3] = -np.abs(x[3])  # all negative
    x[4, :256] = 0.0  # an all-zero super-block
    arr, qtype = testing.quantize_matrix(x, wtype)
    assert qtype == GGMLQuantizationType[wtype]
    y = dequantize(arr, qtype).reshape(x.shape)
    assert np.isfinite(y).all()
    assert np.all(y[4, :256] == 0.0)
    for r in range(x.shape[0]):
        if r == 4:
            continue
        err = np.linalg.norm(y[r] - x[r]) / np.linalg.norm(x[r])
        assert err < ROUNDTRIP_TOL[wtype], (wtype, r, err)


def test_k_quants_need_256_rows() -> None:
    x = np.ones((2, 128), dtype=np.float32)
    for wtype in testing.K_TYPES:
        with pytest.raises(ValueError):
            testing.quantize_matrix(x, wtype)


# every weight type on the first two architectures; the later ones (tests/core/
# test_architectures.py runs them further) at three, to keep the quick loop quick
SWEEP_ARCHS = ("llama", "gemma3")
BUILDS = [(a, t) for a in testing.ARCHS
          for t in (testing.WEIGHT_TYPES if a in SWEEP_ARCHS else ("F32", "Q8_0", "Q4_K"))]


@pytest.mark.parametrize(("arch", "wtype"), BUILDS)
def test_fixture_builds_and_runs(arch: str, wtype: str, cache_dir: Path) -> None:
    path = testing.fixture_path(arch, wtype, cache_dir=cache_dir)
    sizes = testing.default_sizes(arch)
    r = GGUFReader(path)
    assert r.fields["general.architecture"].contents() == arch
    assert len(r.fields["tokenizer.ggml.tokens"].contents()) == sizes.n_vocab
    assert len(r.fields["tokenizer.ggml.token_type"].contents()) == sizes.n_vocab
    for t in r.tensors:
        if len(t.shape) == 1:
            assert t.tensor_type == GGMLQuantizationType.F32, t.name
        else:
            assert t.tensor_type == GGMLQuantizationType[wtype], t.name
    names = {t.name for t in r.tensors}
    assert ("output.weight" in names) == (not sizes.tied)
    if arch == "gemma3":
        assert "blk.0.attn_q_norm.weight" in names and "blk.5.post_ffw_norm.weight" in names
        assert r.fields["gemma3.attention.sliding_window"].contents() == sizes.sliding_window

    model = ReferenceModel(path)
    ids = [int(i) for i in np.random.default_rng(3).integers(0, sizes.n_vocab, 20)]
    logits = model.forward(ids)
    assert logits.shape == (20, sizes.n_vocab)
    assert np.isfinite(logits).all()
    assert logits.std(axis=1).min() > 0.1
    assert len(set(np.argmax(logits, axis=1).tolist())) > 5


def test_fixture_config(cache_dir: Path) -> None:
    llama = ReferenceModel(testing.fixture_path("llama", "F32", cache_dir=cache_dir)).config
    assert (llama.vocab_size, llama.n_head, llama.n_head_kv, llama.head_dim_k) == (301, 12, 4, 64)
    assert not llama.tied_output and not llama.rope_neox and llama.n_rot == 64
    assert not any(llama.sliding_layers)
    gemma = ReferenceModel(testing.fixture_path("gemma3", "F32", cache_dir=cache_dir)).config
    assert gemma.sliding_layers == (True, True, True, True, True, False)
    assert gemma.sliding_window == 8 and gemma.rope_base_local == 10000.0
    assert gemma.rope_base == 1e6 and gemma.rope_neox and gemma.tied_output
    assert gemma.head_dim_k == 128 != gemma.d_model // gemma.n_head
    assert math.isclose(gemma.attn_scale, 1 / math.sqrt(128))
    assert math.isclose(gemma.embed_scale, 16.0)


@pytest.mark.parametrize("arch", SWEEP_ARCHS)
def test_weight_types_agree_with_f32(arch: str, cache_dir: Path) -> None:
    """Same seed, same float weights before quantizing: logits follow the F32 fixture's."""
    ids = [int(i) for i in np.random.default_rng(5).integers(0, 301, 16)]
    base = ReferenceModel(testing.fixture_path(arch, "F32", cache_dir=cache_dir)).forward(ids)
    for wtype, min_corr in (("F16", 0.999), ("Q8_0", 0.99), ("Q6_K", 0.97), ("Q4_K", 0.8)):
        path = testing.fixture_path(arch, wtype, cache_dir=cache_dir)
        other = ReferenceModel(path).forward(ids)
        corr = np.corrcoef(base.ravel(), other.ravel())[0, 1]
        assert corr > min_corr, (arch, wtype, corr)


def test_type_overrides_and_embed_type(tmp_path: Path) -> None:
    path = testing.build_fixture(
        tmp_path / "mix.gguf", "gemma3", "Q4_K", embed_type="Q8_0",
        type_overrides={"ffn_down": "Q6_K", "attn_q": "Q5_0"}, n_layer=1,
    )  # fmt: skip
    types = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}
    assert types["token_embd.weight"] == "Q8_0"
    assert types["blk.0.ffn_down.weight"] == "Q6_K"
    assert types["blk.0.attn_q.weight"] == "Q5_0"
    assert types["blk.0.ffn_up.weight"] == "Q4_K"
    with pytest.raises(ValueError):
        testing.build_fixture(tmp_path / "bad.gguf", "llama", "IQ2_XS")
    with pytest.raises(TypeError):
        testing.build_fixture(tmp_path / "bad.gguf", "llama", "F32", n_heads=3)


def test_fixture_path_is_cached(cache_dir: Path) -> None:
    a = testing.fixture_path("llama", "Q4_0", cache_dir=cache_dir)
    mtime = a.stat().st_mtime_ns
    assert testing.fixture_path("llama", "Q4_0", cache_dir=cache_dir) == a
    assert a.stat().st_mtime_ns == mtime
    b = testing.fixture_path("llama", "Q4_0", seed=1, cache_dir=cache_dir)
    assert b != a and b.read_bytes() != a.read_bytes()


def test_fast_reader_matches_gguf_reader(cache_dir: Path) -> None:
    path = testing.fixture_path("gemma3", "Q4_K", cache_dir=cache_dir)
    slow, fast = GGUFReader(path), open_gguf(path)
    assert list(slow.fields) == list(fast.fields)
    for k, f in slow.fields.items():
        assert f.contents() == fast.fields[k].contents(), k
    assert [t.name for t in slow.tensors] == [t.name for t in fast.tensors]
    for a, b in zip(slow.tensors, fast.tensors, strict=True):
        assert a.tensor_type == b.tensor_type and np.array_equal(a.data, b.data), a.name


@pytest.mark.parametrize("arch", testing.ARCHS)
def test_reference_is_causal(arch: str, cache_dir: Path) -> None:
    model = ReferenceModel(testing.fixture_path(arch, "Q8_0", cache_dir=cache_dir))
    ids = [int(i) for i in np.random.default_rng(11).integers(0, 301, 14)]
    changed = ids.copy()
    changed[9] = (changed[9] + 1) % 301
    a, b = model.forward(ids), model.forward(changed)
    np.testing.assert_allclose(a[:9], b[:9], rtol=0, atol=1e-9)
    assert np.abs(a[9:] - b[9:]).max() > 1e-3
    # A prefix run gives the same logits as the longer run at its positions.
    np.testing.assert_allclose(model.forward(ids[:6]), a[:6], rtol=0, atol=1e-9)


def test_reference_sliding_window(tmp_path: Path) -> None:
    """Two local layers with window 8: position p sees tokens > p - 8 per layer, so the last
    position depends on nothing before p - 14 (two hops of 7)."""
    path = testing.build_fixture(tmp_path / "swa.gguf", "gemma3", "F32", n_layer=2)
    model = ReferenceModel(path)
    assert model.config.sliding_layers == (True, True)
    ids = [int(i) for i in np.random.default_rng(13).integers(0, 301, 24)]
    p = len(ids) - 1
    base = model.forward(ids)[p]
    far = ids.copy()
    for j in range(p - 14):
        far[j] = (far[j] + 17) % 301
    np.testing.assert_allclose(model.forward(far)[p], base, rtol=0, atol=1e-9)
    near = ids.copy()
    near[p - 14] = (near[p - 14] + 17) % 301
    assert np.abs(model.forward(near)[p] - base).max() > 1e-4


def test_rope_styles() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3, 16))
    pos = np.arange(5, dtype=np.float64)
    for neox in (False, True):
        y = _rope(x, pos, 16, 10000.0, neox)
        np.testing.assert_allclose(y[0], x[0])  # position 0 is the identity
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    # neox on halves is the normal (adjacent pairs) rotation of the interleaved vector.
    perm = np.arange(16).reshape(2, 8).T.ravel()  # [0, 8, 1, 9, ...]
    normal = _rope(x[..., perm], pos, 16, 10000.0, False)
    np.testing.assert_allclose(normal, _rope(x, pos, 16, 10000.0, True)[..., perm])
    # n_rot < head_dim leaves the tail alone.
    part = _rope(x, pos, 8, 10000.0, False)
    np.testing.assert_array_equal(part[..., 8:], x[..., 8:])
