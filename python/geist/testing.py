"""Small random-weight GGUF fixtures for tests: every architecture, every supported weight type.

``build_fixture(path, arch, weight_type, seed, **sizes)`` writes one file with ``gguf.GGUFWriter``;
``fixture_path(arch, weight_type, ...)`` builds it once into a cache folder and returns the path
(the same file for the same arguments, within and across processes).

The defaults are chosen to hit the awkward cases:

* llama: vocab 301 (not a multiple of 32), 12 heads over 4 KV heads (GQA ratio 3), head dim 64,
  d_model 768, an untied ``output.weight``, a byte-level BPE vocabulary (gpt2 model, smollm
  pre-tokenizer) with ChatML control tokens and merges.
* gemma3: vocab 301, 6 layers (5 local + 1 global: llama.cpp's fixed pattern), sliding window 8,
  4 heads over 1 KV head, key_length 128 != d_model / n_head, tied output, a SentencePiece
  vocabulary with byte fallback tokens and scores.

* qwen2: Q/K/V biases, NeoX rope, tied output, byte-level BPE with the qwen2 pre-tokenizer.
* qwen3: per-head Q/K norms, key_length 128 != d_model / n_head, untied, BPE (qwen2 pre-tokenizer).
* phi3: fused attn_qkv and gate|up ffn_up, partial rotary (48 of 64 dims), a sliding_window key
  that llama.cpp ignores for phi3 (so does geist), SentencePiece with a space prefix.
* gemma2: 4 layers alternating sliding (window 8) and global, post-norms, soft-capping of
  attention scores and final logits at small caps (5 and 8) so that the tanh bites on random
  weights, tied output, the gemma SentencePiece vocabulary.

``FAMILIES`` names the variants the oracle and tests use: the architectures above plus
``llama3`` (llama with a Llama 3.x rope_freqs tensor, tied output, the llama-bpe pre-tokenizer)
and ``mistral`` (llama with attention.sliding_window 16 on every layer, linear rope scaling 2,
SentencePiece); ``family_fixture_path(family, weight_type)`` builds one.

Every matrix row (ne[0]) is a multiple of 256, so each weight type, K-quants included, applies to
every 2-D tensor. 1-D norm weights stay F32 (random around 1, never constant). gguf quantizes the
legacy types itself; for the K-quants and IQ4 types, which gguf can only dequantize, this module
packs blocks itself with a simple (not optimal) quantizer, checked against gguf's dequantizer in
the tests. ``Q5_K_M_TYPES`` is a type_overrides mix in the spirit of llama.cpp's Q5_K_M recipe.

Use from pytest (the cache makes a session-scoped fixture cheap)::

    @pytest.fixture(scope="session", params=["F32", "Q4_0", "Q4_K"])
    def llama_fixture(request):
        return geist.testing.fixture_path("llama", request.param)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, RopeScalingType, TokenType
from gguf.quants import quantize

__all__ = [
    "ARCHS",
    "FAMILIES",
    "WEIGHT_TYPES",
    "FixtureSizes",
    "build_fixture",
    "default_sizes",
    "family_fixture_path",
    "fixture_cache_dir",
    "fixture_path",
    "quantize_matrix",
]

ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")
WEIGHT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K",
                "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS")  # fmt: skip
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")  # rows of a multiple of 256

# A Q5_K_M-like mix (type_overrides of build_fixture, weight_type "Q5_K"): llama.cpp's Q5_K_M
# keeps Q5_K for most matrices and gives attn_v, ffn_down and output Q6_K (attn_v / ffn_down on
# about half the layers; here on all). token_embd is Q4_K here, so one file holds all three.
Q5_K_M_TYPES: dict[str, str] = {
    "attn_v": "Q6_K", "ffn_down": "Q6_K", "output": "Q6_K", "token_embd": "Q4_K",
}  # fmt: skip

# Bump when the files this module writes change, so cached fixtures are rebuilt.
BUILDER_VERSION = 2

QK_K = 256

_FILE_TYPES: dict[str, int] = {
    "F32": LlamaFileType.ALL_F32,
    "F16": LlamaFileType.MOSTLY_F16,
    "BF16": LlamaFileType.MOSTLY_BF16,
    "Q4_0": LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": LlamaFileType.MOSTLY_Q4_1,
    "Q5_0": LlamaFileType.MOSTLY_Q5_0,
    "Q5_1": LlamaFileType.MOSTLY_Q5_1,
    "Q8_0": LlamaFileType.MOSTLY_Q8_0,
    "Q4_K": LlamaFileType.MOSTLY_Q4_K_M,
    "Q6_K": LlamaFileType.MOSTLY_Q6_K,
    "Q5_K": LlamaFileType.MOSTLY_Q5_K_M,
    "Q3_K": LlamaFileType.MOSTLY_Q3_K_M,
    "Q2_K": LlamaFileType.MOSTLY_Q2_K,
    "IQ4_NL": LlamaFileType.MOSTLY_IQ4_NL,
    "IQ4_XS": LlamaFileType.MOSTLY_IQ4_XS,
}

Array = np.ndarray[Any, np.dtype[Any]]


@dataclass(frozen=True)
class FixtureSizes:
    n_vocab: int
    d_model: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    d_ff: int
    n_ctx: int
    n_rot: int  # 0: head_dim
    rope_base: float
    rms_eps: float
    sliding_window: int  # gemma2/3: the local layers'; llama: every layer (Mistral); phi3: unused
    tied: bool
    # tokenizer: "" = the arch's default; "bpe:<pre>" (gpt2 model, that pre-tokenizer), "spm"
    # (llama SentencePiece with a space prefix), "spm-gemma"
    tokenizer: str = ""
    rope_freqs: bool = False  # write a Llama 3.x rope_freqs tensor (frequency divisors)
    rope_scale: float = 0.0  # > 0: rope.scaling.type linear with this factor
    attn_softcap: float = 0.0  # gemma2: written as attn_logit_softcapping when > 0
    final_softcap: float = 0.0  # gemma2: final_logit_softcapping
    chat_template: str = ""  # "" = the tokenizer's default (ChatML, Phi-3 or Gemma style)


def default_sizes(arch: str) -> FixtureSizes:
    if arch == "llama":
        return FixtureSizes(
            n_vocab=301, d_model=768, n_layer=2, n_head=12, n_head_kv=4, head_dim=64, d_ff=512,
            n_ctx=256, n_rot=0, rope_base=10000.0, rms_eps=1e-5, sliding_window=0, tied=False,
        )  # fmt: skip
    if arch == "gemma3":
        return FixtureSizes(
            n_vocab=301, d_model=256, n_layer=6, n_head=4, n_head_kv=1, head_dim=128, d_ff=512,
            n_ctx=256, n_rot=0, rope_base=1e6, rms_eps=1e-6, sliding_window=8, tied=True,
        )  # fmt: skip
    if arch == "qwen2":
        return FixtureSizes(
            n_vocab=301, d_model=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, d_ff=512,
            n_ctx=256, n_rot=0, rope_base=1e6, rms_eps=1e-6, sliding_window=0, tied=True,
        )  # fmt: skip
    if arch == "qwen3":
        return FixtureSizes(
            n_vocab=301, d_model=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=128, d_ff=512,
            n_ctx=256, n_rot=0, rope_base=1e6, rms_eps=1e-6, sliding_window=0, tied=False,
        )  # fmt: skip
    if arch == "phi3":
        return FixtureSizes(
            n_vocab=301, d_model=256, n_layer=2, n_head=4, n_head_kv=4, head_dim=64, d_ff=512,
            n_ctx=256, n_rot=48, rope_base=10000.0, rms_eps=1e-5, sliding_window=16, tied=False,
        )  # fmt: skip
    if arch == "gemma2":
        return FixtureSizes(
            n_vocab=301, d_model=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=128, d_ff=512,
            n_ctx=256, n_rot=0, rope_base=10000.0, rms_eps=1e-6, sliding_window=8, tied=True,
            attn_softcap=5.0, final_softcap=8.0,
        )  # fmt: skip
    raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")


# --- K-quant packing (gguf 0.19 can dequantize Q4_K / Q6_K but not quantize them) ----------


def _f16(x: Array) -> Array:
    return np.asarray(x, dtype=np.float16)


def _quantize_q4_k(rows: Array) -> Array:
    """Q4_K blocks: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.

    A super-block of 256 holds 8 sub-blocks of 32; value = d*sc[j]*q - dmin*m[j], q in 0..15.
    """
    x = rows.reshape(-1, 8, 32).astype(np.float32)
    nb = x.shape[0]
    lo = np.minimum(x.min(axis=2), 0.0)  # the offset is -dmin*m with m >= 0
    hi = x.max(axis=2)
    sub_scale = (hi - lo) / 15.0
    sub_min = -lo
    d = _f16(sub_scale.max(axis=1) / 63.0)
    dmin = _f16(sub_min.max(axis=1) / 63.0)
    d32 = d.astype(np.float32)[:, None]
    dm32 = dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(sub_scale, d32, out=np.zeros_like(sub_scale), where=d32 > 0)),
                 0, 63).astype(np.uint8)  # fmt: skip
    mn = np.clip(np.rint(np.divide(sub_min, dm32, out=np.zeros_like(sub_min), where=dm32 > 0)),
                 0, 63).astype(np.uint8)  # fmt: skip
    step = (d32 * sc)[:, :, None]
    off = (dm32 * mn)[:, :, None]
    q = np.divide(x + off, step, out=np.zeros_like(x), where=step > 0)
    q = np.clip(np.rint(q), 0, 15).astype(np.uint8)  # (nb, 8, 32)

    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 0x3F) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)  # sub-blocks 2g, 2g+1
    out = np.concatenate(
        [d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), scales, qs], axis=1
    )
    return out


def _quantize_q6_k(rows: Array) -> Array:
    """Q6_K blocks: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, f16 d.

    16 sub-blocks of 16; value = d*scale[j]*(q - 32), q in 0..63.
    """
    x = rows.reshape(-1, 16, 16).astype(np.float32)
    nb = x.shape[0]
    amax = np.abs(x).max(axis=2)
    sub_scale = amax / 31.0
    d = _f16(sub_scale.max(axis=1) / 127.0)
    d32 = d.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(sub_scale, d32, out=np.zeros_like(sub_scale), where=d32 > 0)),
                 -128, 127).astype(np.int8)  # fmt: skip
    step = (d32 * sc.astype(np.float32))[:, :, None]
    q = np.divide(x, step, out=np.zeros_like(x), where=step > 0)
    q = (np.clip(np.rint(q), -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)

    low = q & 0x0F
    high = q >> 4
    # Each half of 128 values: chunk c of 32 takes the low (c < 2) or high (c >= 2) nibble of
    # byte (c % 2) * 32 + i, and bits 2c..2c+1 of qh byte i.
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)],
                        axis=2).reshape(nb, 128)  # fmt: skip
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    return np.concatenate(
        [ql, qh.reshape(nb, 64), sc.view(np.uint8), d.reshape(nb, 1).view(np.uint8)], axis=1
    )


def _pack_q4k_scales(sc: Array, mn: Array) -> Array:
    """Q4_K / Q5_K: 8 six-bit scales and mins -> 12 bytes (layout in cpu_scalar/quants.c)."""
    scales = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 0x3F) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    return scales


def _scale_min_fit(x: Array, levels: int, bits: int) -> tuple[Array, Array, Array, Array, Array]:
    """Asymmetric sub-blocks (..., n_sub, len): value = d*sc*q - dmin*mn, q in 0..levels, sc and
    mn integers below 2**bits. Returns d, dmin (f16, per super-block), sc, mn, q."""
    lo = np.minimum(x.min(axis=2), 0.0)  # the offset is -dmin*m with m >= 0
    sub_scale = (x.max(axis=2) - lo) / levels
    sub_min = -lo
    top = (1 << bits) - 1
    d = _f16(sub_scale.max(axis=1) / top)
    dmin = _f16(sub_min.max(axis=1) / top)
    d32 = d.astype(np.float32)[:, None]
    dm32 = dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(sub_scale, d32, out=np.zeros_like(sub_scale), where=d32 > 0)),
                 0, top).astype(np.uint8)  # fmt: skip
    mn = np.clip(np.rint(np.divide(sub_min, dm32, out=np.zeros_like(sub_min), where=dm32 > 0)),
                 0, top).astype(np.uint8)  # fmt: skip
    step = (d32 * sc)[:, :, None]
    off = (dm32 * mn)[:, :, None]
    q = np.divide(x + off, step, out=np.zeros_like(x), where=step > 0)
    return d, dmin, sc, mn, np.clip(np.rint(q), 0, levels).astype(np.uint8)


def _quantize_q5_k(rows: Array) -> Array:
    """Q5_K blocks: f16 d, f16 dmin, 12 bytes of scales/mins (as Q4_K), 32 bytes qh, 128 bytes of
    low nibbles (as Q4_K); bit j of qh[l] is bit 4 of value l of sub-block j."""
    x = rows.reshape(-1, 8, 32).astype(np.float32)
    nb = x.shape[0]
    d, dmin, sc, mn, q = _scale_min_fit(x, 31, 6)
    low = q & 0x0F
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(nb, 128)
    qh = np.zeros((nb, 32), dtype=np.uint8)
    for j in range(8):
        qh |= ((q[:, j, :] >> 4) & 1) << j
    return np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8),
                           _pack_q4k_scales(sc, mn), qh, qs], axis=1)  # fmt: skip


def _pack_2bit(q: Array) -> Array:
    """(nb, 256) values 0..3 -> 64 bytes: value 128h + 32j + l at bits 2j of byte 32h + l."""
    q = q.reshape(-1, 2, 4, 32)
    out = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return out.reshape(-1, 64).astype(np.uint8)


def _quantize_q2_k(rows: Array) -> Array:
    """Q2_K blocks: 16 bytes scale (low nibble) / min (high nibble) per 16 values, 64 bytes of
    2-bit values, f16 d, f16 dmin; value = d*sc*q - dmin*mn."""
    x = rows.reshape(-1, 16, 16).astype(np.float32)
    nb = x.shape[0]
    d, dmin, sc, mn, q = _scale_min_fit(x, 3, 4)
    return np.concatenate([sc | (mn << 4), _pack_2bit(q.reshape(nb, 256)),
                           d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8)],
                          axis=1)  # fmt: skip


def _quantize_q3_k(rows: Array) -> Array:
    """Q3_K blocks: 32 bytes hmask, 64 bytes of 2-bit values, 12 bytes of 6-bit scales (+32),
    f16 d; value = d*sc*(q - 4), q in 0..7 (its bit 2 in hmask: bit 4h+j of byte l)."""
    x = rows.reshape(-1, 16, 16).astype(np.float32)
    nb = x.shape[0]
    sub_scale = np.abs(x).max(axis=2) / 4.0
    d = _f16(sub_scale.max(axis=1) / 31.0)
    d32 = d.astype(np.float32)[:, None]
    sc = np.clip(np.rint(np.divide(sub_scale, d32, out=np.zeros_like(sub_scale), where=d32 > 0)),
                 0, 31).astype(np.int32)  # fmt: skip
    step = (d32 * sc)[:, :, None]
    q = np.divide(x, step, out=np.zeros_like(x), where=step > 0)
    q = (np.clip(np.rint(q), -4, 3) + 4).astype(np.uint8).reshape(nb, 256)
    hm = (q >> 2).reshape(nb, 8, 32)  # bit k = 4h + j of byte l
    hmask = np.zeros((nb, 32), dtype=np.uint8)
    for k in range(8):
        hmask |= hm[:, k, :] << k
    s6 = (sc + 32).astype(np.uint8)
    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:8] = (s6[:, 0:8] & 0x0F) | ((s6[:, 8:16] & 0x0F) << 4)
    for k in range(16):
        scales[:, 8 + k % 4] |= ((s6[:, k] >> 4) & 3) << (2 * (k // 4))
    return np.concatenate([hmask, _pack_2bit(q & 3), scales, d.reshape(nb, 1).view(np.uint8)],
                          axis=1)  # fmt: skip


IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      dtype=np.float32)  # fmt: skip


def _iq4_nibbles(x: Array, step: Array) -> Array:
    """Index of the level nearest to x / step (0 where step is 0), as uint8."""
    t = np.divide(x, step, out=np.zeros_like(x), where=step != 0)
    return np.abs(t[..., None] - IQ4_LEVELS).argmin(axis=-1).astype(np.uint8)


def _pack_nibbles32(idx: Array) -> Array:
    """(..., 32) nibbles -> (..., 16) bytes: low nibbles values 0..15, high 16..31."""
    return (idx[..., :16] | (idx[..., 16:] << 4)).astype(np.uint8)


def _signed_extreme(x: Array) -> Array:
    """Per last-axis row: the value of largest magnitude, with its sign."""
    return np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _quantize_iq4_nl(rows: Array) -> Array:
    """IQ4_NL blocks of 32: f16 d, 16 nibble bytes; value = d * level[nibble]."""
    x = rows.reshape(-1, 32).astype(np.float32)
    d = _f16(_signed_extreme(x) / -127.0)
    idx = _iq4_nibbles(x, d.astype(np.float32)[:, None])
    return np.concatenate([d.reshape(-1, 1).view(np.uint8), _pack_nibbles32(idx)], axis=1)


def _quantize_iq4_xs(rows: Array) -> Array:
    """IQ4_XS blocks: f16 d, u16 scales_h, 4 bytes scales_l, 128 nibble bytes; sub-block j of 32
    has the 6-bit scale ls_j (+32); value = d * ls_j * level[nibble]."""
    x = rows.reshape(-1, 8, 32).astype(np.float32)
    nb = x.shape[0]
    sub = _signed_extreme(x) / -127.0
    d = _f16(np.abs(sub).max(axis=1) / 31.0)
    d32 = d.astype(np.float32)[:, None]
    ls = np.clip(np.rint(np.divide(sub, d32, out=np.zeros_like(sub), where=d32 > 0)),
                 -32, 31).astype(np.int32)  # fmt: skip
    idx = _iq4_nibbles(x, (d32 * ls)[:, :, None])
    u = (ls + 32).astype(np.uint16)
    scales_h = np.zeros(nb, dtype=np.uint16)
    for j in range(8):
        scales_h |= (u[:, j] >> 4) << (2 * j)
    lo = (u & 0x0F).astype(np.uint8)
    scales_l = lo[:, 0::2] | (lo[:, 1::2] << 4)
    return np.concatenate([d.reshape(nb, 1).view(np.uint8), scales_h.reshape(nb, 1).view(np.uint8),
                           scales_l, _pack_nibbles32(idx).reshape(nb, 128)], axis=1)  # fmt: skip


_PACKERS = {
    "Q4_K": _quantize_q4_k, "Q6_K": _quantize_q6_k, "Q5_K": _quantize_q5_k,
    "Q3_K": _quantize_q3_k, "Q2_K": _quantize_q2_k, "IQ4_XS": _quantize_iq4_xs,
}  # fmt: skip


def quantize_matrix(data: Array, weight_type: str) -> tuple[Array, GGMLQuantizationType]:
    """Encode a float (rows, cols) matrix as weight_type; returns (array for GGUFWriter, type)."""
    qtype = GGMLQuantizationType[weight_type]
    data = np.ascontiguousarray(data, dtype=np.float32)
    if weight_type == "F32":
        return data, qtype
    if weight_type == "F16":
        return data.astype(np.float16), qtype
    if weight_type in K_TYPES:
        if data.shape[-1] % QK_K != 0:
            raise ValueError(f"{weight_type} needs rows of a multiple of {QK_K}, got {data.shape}")
        blocks = _PACKERS[weight_type](data.reshape(-1, QK_K))
        return blocks.reshape(data.shape[0], -1), qtype
    if weight_type == "IQ4_NL":
        if data.shape[-1] % 32 != 0:
            raise ValueError(f"IQ4_NL needs rows of a multiple of 32, got {data.shape}")
        return _quantize_iq4_nl(data.reshape(-1, 32)).reshape(data.shape[0], -1), qtype
    return quantize(data, qtype), qtype


# --- tokenizers ------------------------------------------------------------------------------


def transformers_tojson(x: Any, ensure_ascii: bool = False, indent: int | str | None = None,
                        separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """The `tojson` filter Hugging Face transformers installs for chat templates in place of
    jinja2's (its documented behaviour: json.dumps with these four arguments and defaults), for
    jinja2 references of the core's template engine (`env.filters["tojson"] = ...`)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def gpt2_byte_chars() -> list[str]:
    """The 256 printable stand-ins of byte-level BPE, in byte order 0..255."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


_BPE_MERGES = [
    ("Ġ", "t"), ("Ġ", "a"), ("i", "n"), ("h", "e"), ("r", "e"), ("o", "n"), ("e", "r"),
    ("Ġt", "he"), ("a", "t"), ("Ġ", "s"), ("e", "n"), ("Ġ", "o"), ("Ġ", "w"), ("n", "d"),
    ("i", "t"), ("o", "r"), ("i", "s"), ("a", "l"), ("Ġ", "c"), ("in", "g"), ("Ġ", "b"),
    ("Ġ", "f"), ("o", "u"), ("a", "n"), ("Ġ", "m"), ("Ġo", "f"), ("a", "r"), ("Ġ", "d"),
    ("Ġ", "h"), ("e", "s"), ("l", "e"), ("Ġa", "nd"), ("Ġ", "p"), ("Ġt", "o"), ("Ġ", "i"),
    ("e", "d"), ("Ġ", "l"), ("Ġ", "Ġ"), ("Ġ", "n"), ("Ġi", "n"), ("Ġ", "g"), ("Ġth", "e"),
    ("Ġ", "th"), ("t", "h"), ("o", "w"), ("Ġ", "e"), ("r", "o"), ("i", "c"), ("Ġw", "as"),
    ("a", "s"), ("Ġ", "y"), ("Ġs", "t"), ("Ġd", "r"), ("a", "g"), ("Ġdr", "ag"), ("o", "l"),
]  # fmt: skip

_BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _bpe_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    tokens = list(_BPE_SPECIALS) + gpt2_byte_chars()
    types = [int(TokenType.CONTROL)] * len(_BPE_SPECIALS) + [int(TokenType.NORMAL)] * 256
    if n_vocab < len(tokens):
        raise ValueError(f"llama fixtures need n_vocab >= {len(tokens)} (specials + 256 bytes)")
    merges: list[str] = []
    have = set(tokens)
    for a, b in _BPE_MERGES:
        if len(tokens) >= n_vocab:
            break
        if a in have and b in have and a + b not in have:
            tokens.append(a + b)
            types.append(int(TokenType.NORMAL))
            merges.append(f"{a} {b}")
            have.add(a + b)
    # Past the list: deterministic letter strings, pairs first, then each length in turn: a
    # letter merged with the string of one letter fewer made before it (so a large vocabulary's
    # tokens stay a few letters long)
    letters = "etaoinshrdlucmfwypvbgk"
    n_l = len(letters)
    length, i = 2, 0
    while len(tokens) < n_vocab:
        if i == n_l**length:
            length, i = length + 1, 0
        a, rest, k = letters[i % n_l], "", i // n_l
        for _ in range(length - 1):
            rest, k = rest + letters[k % n_l], k // n_l
        i += 1
        if a + rest in have:
            continue
        tokens.append(a + rest)
        types.append(int(TokenType.NORMAL))
        merges.append(f"{a} {rest}")
        have.add(a + rest)
    return tokens, types, merges


_SPM_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
# llama-style SentencePiece (phi3, mistral): <unk> 0, <s> 1, </s> 2, then chat markers (llama.cpp
# requires <|endoftext|> in a model whose name says phi3)
_LLAMA_SPM_SPECIALS = [
    "<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>",
]  # fmt: skip

_PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
    "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

_SPM_PIECES = [
    "▁", "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", "c", "m", ",", ".",
    "▁t", "he", "▁the", "in", "er", "on", "▁a", "an", "en", "▁s", "▁w", "at", "nd", "▁o",
    "▁and", "is", "or", "▁of", "it", "ing", "▁to", "ed", "▁in", "▁d", "ou", "▁c", "▁b",
    "ar", "es", "▁f", "▁m", "▁p", "▁h", "▁dr", "ag", "▁drag", "on", "▁dragon",
]  # fmt: skip

_GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + "
    "'\\n' + message['content'] + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def _spm_vocab(n_vocab: int, specials: list[str] | None = None
               ) -> tuple[list[str], list[int], list[float]]:
    tokens = list(specials or _SPM_SPECIALS)
    types = [int(TokenType.CONTROL)] * len(tokens)
    scores = [-1000.0] * len(tokens)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [int(TokenType.BYTE)] * 256
    scores += [0.0] * 256
    if n_vocab < len(tokens):
        raise ValueError(
            f"SentencePiece fixtures need n_vocab >= {len(tokens)} (specials + 256 bytes)")
    have = set(tokens)
    pieces = [p for p in _SPM_PIECES]
    letters = "etaoinshrdlucmfwypvbgk"
    pieces += [a + b for b in letters for a in letters]
    rank = 0
    for p in pieces:
        if len(tokens) >= n_vocab:
            break
        if p in have:
            continue
        tokens.append(p)
        types.append(int(TokenType.NORMAL))
        scores.append(-float(rank))  # earlier pieces are more likely, as in real SPM vocabularies
        have.add(p)
        rank += 1
    if len(tokens) < n_vocab:
        raise ValueError(f"n_vocab {n_vocab} is larger than this builder's piece list")
    return tokens, types, scores


# --- the builder -----------------------------------------------------------------------------


def _sizes_for(arch: str, overrides: Mapping[str, Any]) -> FixtureSizes:
    sizes = default_sizes(arch)
    unknown = set(overrides) - set(asdict(sizes))
    if unknown:
        raise TypeError(f"unknown size argument(s): {', '.join(sorted(unknown))}")
    sizes = replace(sizes, **overrides)
    if sizes.n_head % sizes.n_head_kv != 0:
        raise ValueError("n_head must be a multiple of n_head_kv")
    if arch in ("llama", "qwen2", "phi3") and sizes.n_head * sizes.head_dim != sizes.d_model:
        raise ValueError(f"{arch} fixtures need n_head * head_dim == d_model")
    n_rot = sizes.n_rot or sizes.head_dim
    if n_rot % 2 or n_rot > sizes.head_dim:
        raise ValueError("n_rot must be even and at most head_dim")
    return sizes


def build_fixture(
    path: str | Path,
    arch: str = "llama",
    weight_type: str = "Q8_0",
    seed: int = 0,
    *,
    embed_type: str | None = None,
    type_overrides: Mapping[str, str] | None = None,
    **sizes: Any,
) -> Path:
    """Write a small random-weight GGUF of ``arch`` whose 2-D weights are ``weight_type``.

    ``embed_type`` is the type of token_embd (and output), default ``weight_type`` (the real
    models use Q8_0). ``type_overrides`` maps a tensor role ("attn_q", "attn_k", "attn_v",
    "attn_qkv" (phi3), "attn_output", "ffn_gate", "ffn_up", "ffn_down", "token_embd", "output")
    to a type, for mixes like Q4_K_M. ``sizes`` override fields of ``default_sizes(arch)``.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    types = {"_": weight_type, "token_embd": embed_type or weight_type}
    types["output"] = types["token_embd"]
    types.update(type_overrides or {})
    for t in types.values():
        if t not in WEIGHT_TYPES:
            raise ValueError(f"unknown weight type {t!r}; expected one of {WEIGHT_TYPES}")
    sz = _sizes_for(arch, sizes)
    n_rot = sz.n_rot or sz.head_dim
    rng = np.random.default_rng(seed)
    path = Path(path)

    w = GGUFWriter(path, arch)
    w.add_name(f"geist fixture {arch} {weight_type} seed {seed}")
    w.add_type("model")
    w.add_file_type(_FILE_TYPES[weight_type])
    w.add_quantization_version(2)
    w.add_context_length(sz.n_ctx)
    w.add_embedding_length(sz.d_model)
    w.add_block_count(sz.n_layer)
    w.add_feed_forward_length(sz.d_ff)
    w.add_head_count(sz.n_head)
    w.add_head_count_kv(sz.n_head_kv)
    w.add_layer_norm_rms_eps(sz.rms_eps)
    w.add_rope_freq_base(sz.rope_base)
    if arch in ("qwen3", "gemma2", "gemma3"):
        w.add_key_length(sz.head_dim)
        w.add_value_length(sz.head_dim)
    if arch in ("gemma2", "gemma3", "phi3") or (arch == "llama" and sz.sliding_window > 0):
        w.add_sliding_window(sz.sliding_window)
    if arch == "gemma2":
        if sz.attn_softcap > 0:
            w.add_attn_logit_softcapping(sz.attn_softcap)
        if sz.final_softcap > 0:
            w.add_final_logit_softcapping(sz.final_softcap)
    if sz.rope_scale > 0:
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(sz.rope_scale)
    if arch in ("llama", "qwen2", "qwen3", "phi3") or n_rot != sz.head_dim:
        w.add_rope_dimension_count(n_rot)
    if arch == "llama":
        w.add_vocab_size(sz.n_vocab)
    tok = sz.tokenizer or {"llama": "bpe:smollm", "qwen2": "bpe:qwen2", "qwen3": "bpe:qwen2",
                           "phi3": "spm"}.get(arch, "spm-gemma")  # fmt: skip
    if tok.startswith("bpe:"):
        tokens, ttypes, merges = _bpe_vocab(sz.n_vocab)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(tok[4:])
        w.add_token_list(tokens)
        w.add_token_types(ttypes)
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_pad_token_id(2)
        w.add_add_bos_token(tok == "bpe:llama-bpe")
        w.add_add_space_prefix(False)
        w.add_chat_template(sz.chat_template or _CHATML_TEMPLATE)
    elif tok == "spm":
        tokens, ttypes, scores = _spm_vocab(sz.n_vocab, _LLAMA_SPM_SPECIALS)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(ttypes)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(True)
        w.add_chat_template(sz.chat_template or _PHI3_TEMPLATE)
    elif tok == "spm-gemma":
        tokens, ttypes, scores = _spm_vocab(sz.n_vocab)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(ttypes)
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
        w.add_chat_template(sz.chat_template or _GEMMA_TEMPLATE)
    else:
        raise ValueError(f"unknown tokenizer {tok!r}")

    def matrix(name: str, role: str, rows: int, cols: int, std: float) -> None:
        data = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(std)
        arr, qtype = quantize_matrix(data, types.get(role, types["_"]))
        w.add_tensor(name, arr, raw_dtype=qtype)

    def norm(name: str, n: int) -> None:
        data = (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
        w.add_tensor(name, data)

    def bias(name: str, n: int) -> None:
        w.add_tensor(name, (0.3 * rng.standard_normal(n)).astype(np.float32))

    d, hd = sz.d_model, sz.head_dim
    qd, kd = sz.n_head * hd, sz.n_head_kv * hd
    # Embedding scale: logits = norm(h) . E[v] have std ~ 3 when E ~ N(0, 3/sqrt(d)).
    embd_std = 3.0 / np.sqrt(d)
    matrix("token_embd.weight", "token_embd", sz.n_vocab, d, embd_std)
    norm("output_norm.weight", d)
    if not sz.tied:
        matrix("output.weight", "output", sz.n_vocab, d, embd_std)
    if sz.rope_freqs:
        w.add_tensor("rope_freqs.weight", llama3_rope_freqs(n_rot, sz.rope_base))
    # Q and K get gain 1.5 each so attention is peaked (a masking or RoPE slip shows in logits).
    for i in range(sz.n_layer):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", d)
        if arch == "phi3":  # one fused matrix, rows Q | K | V, at Q/K's gain throughout
            matrix(p + "attn_qkv.weight", "attn_qkv", qd + 2 * kd, d, 1.5 / np.sqrt(d))
        else:
            matrix(p + "attn_q.weight", "attn_q", qd, d, 1.5 / np.sqrt(d))
            matrix(p + "attn_k.weight", "attn_k", kd, d, 1.5 / np.sqrt(d))
            matrix(p + "attn_v.weight", "attn_v", kd, d, 1.0 / np.sqrt(d))
        if arch == "qwen2":
            bias(p + "attn_q.bias", qd)
            bias(p + "attn_k.bias", kd)
            bias(p + "attn_v.bias", kd)
        matrix(p + "attn_output.weight", "attn_output", d, qd, 1.0 / np.sqrt(qd))
        if arch in ("qwen3", "gemma3"):
            norm(p + "attn_q_norm.weight", hd)
            norm(p + "attn_k_norm.weight", hd)
        if arch in ("gemma2", "gemma3"):
            norm(p + "post_attention_norm.weight", d)
            norm(p + "post_ffw_norm.weight", d)
        norm(p + "ffn_norm.weight", d)
        if arch == "phi3":  # rows gate | up
            matrix(p + "ffn_up.weight", "ffn_up", 2 * sz.d_ff, d, 1.0 / np.sqrt(d))
        else:
            matrix(p + "ffn_gate.weight", "ffn_gate", sz.d_ff, d, 1.0 / np.sqrt(d))
            matrix(p + "ffn_up.weight", "ffn_up", sz.d_ff, d, 1.0 / np.sqrt(d))
        matrix(p + "ffn_down.weight", "ffn_down", d, sz.d_ff, 1.0 / np.sqrt(sz.d_ff))

    path.parent.mkdir(parents=True, exist_ok=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama3_rope_freqs(n_rot: int, base: float, factor: float = 8.0, low: float = 1.0,
                      high: float = 4.0, orig_ctx: int = 32) -> Array:
    """Llama 3.1's frequency divisors (what convert_hf_to_gguf writes as rope_freqs), for a tiny
    original context so that most dimensions of a 32-token test are scaled."""
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2 * np.pi / inv
    lo_w, hi_w = orig_ctx / low, orig_ctx / high
    smooth = (orig_ctx / wavelen - low) / (high - low)
    out = np.where(wavelen < hi_w, 1.0,
                   np.where(wavelen > lo_w, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return out.astype(np.float32)


# --- families: the variants the tests and the llama.cpp oracle use ---------------------------

FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {}),
    "llama3": ("llama", {"rope_freqs": True, "tied": True, "tokenizer": "bpe:llama-bpe",
                         "rope_base": 500000.0}),
    "mistral": ("llama", {"sliding_window": 16, "rope_scale": 2.0, "tokenizer": "spm"}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "phi3": ("phi3", {}),
    "gemma2": ("gemma2", {}),
    "gemma3": ("gemma3", {}),
}  # fmt: skip


def family_fixture_path(family: str, weight_type: str = "Q8_0", seed: int = 0,
                        **kwargs: Any) -> Path:
    """fixture_path() of a FAMILIES variant (kwargs: fixture_path's, sizes over the family's)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {tuple(FAMILIES)}")
    arch, sizes = FAMILIES[family]
    return fixture_path(arch, weight_type, seed, **(sizes | kwargs))


# --- cached fixtures -------------------------------------------------------------------------


def fixture_cache_dir() -> Path:
    """Where fixture_path() keeps its files: a per-user folder in the system temp dir."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"geist-fixtures-{uid}"


_BUILT: dict[str, Path] = {}
_BUILT_LOCK = threading.Lock()


def fixture_path(
    arch: str = "llama",
    weight_type: str = "Q8_0",
    seed: int = 0,
    *,
    cache_dir: str | Path | None = None,
    embed_type: str | None = None,
    type_overrides: Mapping[str, str] | None = None,
    **sizes: Any,
) -> Path:
    """Path of the fixture for these arguments, built on first use.

    The file name carries a hash of the arguments and BUILDER_VERSION; the file is written to a
    temporary name and renamed, so parallel test processes never read half a file.
    """
    spec = {
        "v": BUILDER_VERSION, "arch": arch, "type": weight_type, "seed": seed,
        "embed": embed_type, "over": dict(sorted((type_overrides or {}).items())),
        "sizes": dict(sorted(sizes.items())),
    }  # fmt: skip
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    base = Path(cache_dir) if cache_dir is not None else fixture_cache_dir()
    target = base / f"{arch}-{weight_type}-s{seed}-{digest}.gguf"
    key = str(target)
    with _BUILT_LOCK:
        if key in _BUILT and target.is_file():
            return target
        if not target.is_file():
            base.mkdir(parents=True, exist_ok=True)
            tmp = base / f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                build_fixture(
                    tmp, arch, weight_type, seed, embed_type=embed_type,
                    type_overrides=type_overrides, **sizes,
                )  # fmt: skip
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
        _BUILT[key] = target
    return target
