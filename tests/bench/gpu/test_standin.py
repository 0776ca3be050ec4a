"""standin.py (the GPU benchmark's same-geometry model files): a stand-in keeps the real file's
size, header and tensor table, holds valid blocks of every type the real models use (gguf's own
dequantizer reads them as finite weights of sane size), differs from the real weights, and loads
and runs in geist."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

import geist
from geist.testing import fixture_path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("gpu_standin", HERE / "standin.py")
assert _spec and _spec.loader
standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin)

# every type in SmolLM2 Q4_1 and Gemma 3 Q4_K_M: Q8_0, Q4_1, Q5_0, Q4_K, Q6_K (and F32 norms)
MIX = {"token_embd": "Q8_0", "output": "Q8_0", "attn_k": "Q4_1", "attn_v": "Q6_K",
       "ffn_down": "Q5_0"}


def test_standin_matches_the_real_geometry_and_runs(tmp_path: Path) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    real = fixture_path("llama", "Q4_K", type_overrides=MIX)
    standin.header(real, tmp_path / "m")
    meta = json.loads((tmp_path / "m.json").read_text())
    out = tmp_path / "m.gguf"
    standin.make(tmp_path / "m.json", out)
    standin.check(tmp_path / "m.json", out)
    assert out.stat().st_size == real.stat().st_size == meta["size"]

    a, b = GGUFReader(str(real)), GGUFReader(str(out))
    assert b.data_offset == a.data_offset
    assert [(t.name, t.tensor_type, list(t.shape), t.data_offset) for t in a.tensors] == \
        [(t.name, t.tensor_type, list(t.shape), t.data_offset) for t in b.tensors]
    types = {t.tensor_type.name for t in b.tensors}
    assert {"Q8_0", "Q4_1", "Q5_0", "Q4_K", "Q6_K", "F32"} <= types
    for t in b.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float64)
        assert np.isfinite(w).all(), t.name
        if t.name.endswith("norm.weight"):
            assert abs(w.mean() - 1.0) < 0.05, t.name
        else:
            assert 0.005 < w.std() < 0.2 and np.abs(w).max() < 1.0, (t.name, w.std())
    ra = next(t for t in a.tensors if t.name == "blk.0.attn_v.weight")
    rb = next(t for t in b.tensors if t.name == "blk.0.attn_v.weight")
    assert bytes(ra.data) != bytes(rb.data)  # generated, not copied

    m = geist.Model.load(out)
    try:
        with m.session(max_seq_len=32) as s:
            logits = s.eval([1, 5, 9, 20])
        assert logits.shape == (4, m.n_vocab) and np.isfinite(logits).all()
    finally:
        m.close()
