"""The architectures added after llama and gemma3 (qwen2, qwen3, phi3, gemma2, and llama's Llama 3.x
rope_freqs and Mistral sliding-window variants: geist.testing.FAMILIES) on the CPU backends:

- cpu_scalar with exact float activations against the float64 numpy reference at every position
  of a 32-token sequence (as test_forward.py does for llama and gemma3; cpu_x86 offers only the
  8-bit activations);
- cpu_scalar and cpu_x86 with the default 8-bit activations against the reference's rounding on
  one-layer fixtures;
- 32 greedy tokens equal between cpu_scalar and cpu_x86, and their logits on a prompt;
- each recipe's distinguishing feature is really exercised (biases, QK norms, fused tensors,
  rope_freqs, the sliding window, soft-capping change the logits);
- `geist inspect` and `geist plan` on every family.

llama.cpp's outputs on the same fixtures are checked in tests/oracle/test_llama_cpp_refs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

import geist
from geist import cli, plan, testing
from geist.reference import ReferenceModel

NEW = ["llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2"]
TYPES = ["F32", "Q8_0", "Q4_K", "Q6_K"]
BACKENDS = ["cpu_scalar", "cpu_x86"]


def engine_or_skip(backend: str, exact: bool) -> geist.Engine:
    try:
        return geist.Engine(backend=backend, exact_activations=exact)
    except geist.GeistError:
        pytest.skip(f"{backend} is not usable on this CPU")


def relative_errors(native: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return np.linalg.norm(native - expected, axis=1) / np.linalg.norm(expected, axis=1)


def run(path: Path, engine: geist.Engine, n: int = 32) -> tuple[list[int], np.ndarray]:
    with geist.Model.load(path, engine=engine) as model:
        ids = [int(t) for t in np.random.default_rng(7).integers(0, model.n_vocab, n)]
        with model.session(max_seq_len=n, kv_mode="f32") as s:
            return ids, s.eval(ids).astype(np.float64)


@pytest.fixture(scope="module")
def exact_engine() -> geist.Engine:
    return geist.Engine(backend="cpu_scalar", exact_activations=True)


@pytest.mark.parametrize("weight_type", TYPES)
@pytest.mark.parametrize("family", NEW)
def test_exact_activations_match_float64_reference(family: str, weight_type: str,
                                                   exact_engine: geist.Engine) -> None:
    path = testing.family_fixture_path(family, weight_type, seed=11)
    ids, native = run(path, exact_engine)
    expected = ReferenceModel(path, act_quant=False).forward(ids)
    assert np.std(expected) > 0.1
    rel = relative_errors(native, expected)
    print(f"{family} {weight_type}: max relative error {rel.max():.2e}")
    assert rel.max() < (1e-4 if weight_type in ("F32", "F16") else 1e-3)
    assert (np.argmax(native, axis=1) == np.argmax(expected, axis=1)).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weight_type", ["Q8_0", "Q4_K"])
@pytest.mark.parametrize("family", NEW)
def test_8bit_activations_match_reference_rounding(family: str, weight_type: str,
                                                   backend: str) -> None:
    """As test_forward.py's: position 0 and a quarter of the positions agree to float precision
    (an activation within float32 rounding of a boundary may round the other way later)."""
    engine = engine_or_skip(backend, exact=False)
    path = testing.family_fixture_path(family, weight_type, seed=12, n_layer=1)
    ids, native = run(path, engine)
    engine.close()
    rel = relative_errors(native, ReferenceModel(path, act_quant=True).forward(ids))
    exact = rel < 1e-5
    print(f"{family} {weight_type} {backend}: {exact.sum()}/32 within 1e-5, max {rel.max():.2e}")
    assert exact[0] and exact.mean() >= 0.25


@pytest.mark.parametrize("family", NEW)
def test_greedy_tokens_equal_on_scalar_and_x86(family: str) -> None:
    x86 = engine_or_skip("cpu_x86", exact=False)
    scalar = geist.Engine(backend="cpu_scalar")
    path = testing.family_fixture_path(family, "Q4_K", seed=3)
    out, logits = [], []
    prompt = [int(t) for t in np.random.default_rng(9).integers(0, 301, 20)]
    for eng in (scalar, x86):
        with geist.Model.load(path, engine=eng) as m:
            with m.session(max_seq_len=64) as s:
                s.prefill([5, 17, 42, 99])
                out.append([s.step() for _ in range(32)])
            with m.session(max_seq_len=64) as s:
                logits.append(s.eval(prompt).astype(np.float64))
        eng.close()
    assert out[0] == out[1] and len(out[0]) == 32
    assert relative_errors(logits[1], logits[0]).max() < 1e-5


def _reader_config(family: str) -> tuple[ReferenceModel, Path]:
    path = testing.family_fixture_path(family, "F32", seed=11)
    return ReferenceModel(path, act_quant=False), path


def test_recipes_are_read_from_metadata() -> None:
    cfg = {f: _reader_config(f)[0].config for f in NEW}
    assert cfg["qwen2"].rope_neox and cfg["qwen3"].rope_neox and cfg["phi3"].rope_neox
    assert not cfg["llama3"].rope_neox and cfg["llama3"].tied_output
    assert cfg["llama3"].rope_freq_factors is not None
    assert max(cfg["llama3"].rope_freq_factors) == 8.0 and min(cfg["llama3"].rope_freq_factors) == 1
    assert cfg["mistral"].sliding_layers == (True, True) and cfg["mistral"].sliding_window == 16
    assert cfg["mistral"].rope_scale == 2.0
    assert cfg["phi3"].n_rot == 48 and not any(cfg["phi3"].sliding_layers)  # as llama.cpp
    assert cfg["qwen3"].head_dim_k == 128 != cfg["qwen3"].d_model // cfg["qwen3"].n_head
    g = cfg["gemma2"]
    assert g.sliding_layers == (True, False, True, False) and g.sliding_window == 8
    assert (g.attn_logit_softcap, g.final_logit_softcap) == (5.0, 8.0)
    names = {t.name for t in GGUFReader(_reader_config("phi3")[1]).tensors}
    assert "blk.0.attn_qkv.weight" in names and "blk.0.ffn_gate.weight" not in names
    names = {t.name for t in GGUFReader(_reader_config("qwen2")[1]).tensors}
    assert {"blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"} <= names


def test_each_recipe_feature_changes_the_logits() -> None:
    """The feature that sets a family apart is in the computation: dropping it from the numpy
    reference moves the logits the native pass matches."""
    ids = [int(t) for t in np.random.default_rng(7).integers(0, 301, 32)]
    eng = geist.Engine(backend="cpu_scalar", exact_activations=True)
    changes: dict[str, float] = {}
    for family in NEW:
        ref, path = _reader_config(family)
        _, native = run(path, eng)
        full = ref.forward(ids)
        w, cfg = ref._w, ref.config
        if family == "qwen2":
            saved = [(layer.bq, layer.bk, layer.bv) for layer in w.layers]
            for layer in w.layers:
                layer.bq = layer.bk = layer.bv = None
            without = ref.forward(ids)
            for layer, (a, b, c) in zip(w.layers, saved, strict=True):
                layer.bq, layer.bk, layer.bv = a, b, c
        elif family == "qwen3":
            saved_n = [(layer.q_norm, layer.k_norm) for layer in w.layers]
            for layer in w.layers:
                layer.q_norm = layer.k_norm = None
            without = ref.forward(ids)
            for layer, (a, b) in zip(w.layers, saved_n, strict=True):
                layer.q_norm, layer.k_norm = a, b
        else:
            from dataclasses import replace

            off = {"llama3": {"rope_freq_factors": None},
                   "mistral": {"sliding_layers": (False, False)},
                   "phi3": {"n_rot": cfg.head_dim_k},
                   "gemma2": {"attn_logit_softcap": 0.0, "final_logit_softcap": 0.0}}[family]
            ref.config = replace(cfg, **off)
            without = ref.forward(ids)
            ref.config = cfg
        assert relative_errors(native, full).max() < 1e-4
        changes[family] = float(relative_errors(without, full).max())
    eng.close()
    print(changes)
    assert all(v > 1e-2 for v in changes.values()), changes
    # gemma2's final cap bounds every logit
    ref, path = _reader_config("gemma2")
    _, native = run(path, geist.default_engine("cpu_scalar"))
    assert np.abs(native).max() < 8.0


@pytest.mark.parametrize("family", NEW)
def test_inspect_and_plan(family: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = testing.family_fixture_path(family, "Q8_0")
    arch = testing.FAMILIES[family][0]
    assert cli.main(["inspect", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["info"]["architecture"] == arch
    assert out["memory"]["total_owned"] >= 0
    cfg = ReferenceModel(path).config
    info = out["info"]
    assert info["sliding_layers"] == [i for i in range(cfg.n_layer) if cfg.is_sliding(i)]
    assert info["rope_neox"] == cfg.rope_neox and info["tied_output"] == cfg.tied_output
    assert info["rope_freq_factors"] == (cfg.rope_freq_factors is not None)
    assert info["rope_scale"] == cfg.rope_scale and info["n_rot"] == cfg.n_rot
    assert info["qk_norm"] == (family == "qwen3") and info["attn_biases"] == (family == "qwen2")
    assert (info["attn_softcap"], info["final_softcap"]) == (cfg.attn_logit_softcap,
                                                             cfg.final_logit_softcap)
    assert cli.main(["plan", str(path), "--npcs", "3", "--max-seq-len", "64", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["npcs"] == 3
    with geist.Model.load(path) as m, m.session(max_seq_len=64) as s:
        assert plan.make_plan(path, npcs=3, max_seq_len=64, kv_mode="f16",
                              prefix_tokens=0)["per_session"]["kv_cache"] == s.memory()["kv_cache"]


def test_unknown_architecture_and_longrope_are_refused(tmp_path: Path) -> None:
    path = testing.build_fixture(tmp_path / "q.gguf", "qwen2", "F32", n_layer=1)
    data = bytearray(path.read_bytes())
    at = data.find(b"qwen2")  # general.architecture's value comes first
    data[at : at + 5] = b"qwen9"
    with pytest.raises(geist.UnsupportedError, match=r"unknown architecture 'qwen9' \(supported: "
                       r"llama, qwen2, qwen3, phi3, gemma2, gemma3\)"):
        geist.Model.from_buffer(bytes(data))
