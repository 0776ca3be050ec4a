"""Independent numpy forward pass for the GGUF models geist runs (llama, qwen2, qwen3, phi3, gemma2,
gemma3).

This is the oracle the native core is checked against: it shares nothing with the C code but
the file. Weights are read with ``gguf.GGUFReader`` and dequantized with
``gguf.quants.dequantize`` (exactly: every dequantized value is a float32, as in ggml), then all
arithmetic runs in float64. The one exception of storage, not of arithmetic: the token embedding
(which is also the tied output matrix: 262144 x 640 for Gemma 3) stays float32 in memory and is
widened to float64 a slice of rows at a time for the output projection, so the logits are float64
too without holding a 1.3 GB float64 copy.

The model is configured from GGUF metadata only. Facts checked against llama.cpp's outputs on the
real models (tests/core/test_reference.py):

* llama: RMSNorm; grouped-query attention; SwiGLU FFN; RoPE on adjacent pairs (x[2i], x[2i+1]),
  ggml's "normal" mode (the GGUF converter permuted Q/K for it), theta_i = base^(-2i/n_rot) over
  the first n_rot = rope.dimension_count dims; attention scale 1/sqrt(head_dim); output tied to
  token_embd when output.weight is absent.
* gemma3: embeddings scaled by sqrt(d_model); RMSNorm weights used as stored (the GGUF converter
  already added the 1 of Gemma's (1 + w)); per-head RMSNorm of Q and K before RoPE;
  post_attention_norm and post_ffw_norm on the sublayer outputs before the residual add; gated
  GELU (tanh form) FFN; attention scale 1/sqrt(key_length); RoPE on halves (x[i], x[i + n_rot/2]),
  ggml's "neox" mode; every 6th layer ((i + 1) % 6 == 0) is global with the file's rope base, the
  others are local: rope base 10000 and a causal window (position p sees keys k with
  p - k < sliding_window); no final logit softcapping.

Checked against llama.cpp's outputs on synthesized fixtures (tests/oracle/test_llama_cpp_refs.py):

* llama with Llama 3.x RoPE scaling: the rope_freqs tensor divides each frequency
  (theta_i = pos * base^(-2i/n_rot) / rope_freqs[i]); rope.scaling.type linear divides positions
  by rope.scaling.factor. With attention.sliding_window (Mistral) every layer attends over the
  last sliding_window positions (llama.cpp ignores the key for llama: equal below the window).
* qwen2: llama's recipe with NeoX RoPE and q/k/v biases (added after the products).
* qwen3: NeoX RoPE, per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm) before RoPE.
* phi3: NeoX RoPE over rope.dimension_count dims; a fused attn_qkv (rows: Q, then K, then V) and
  a fused ffn_up of 2 * d_ff rows (gate, then up: silu(gate) * up); its sliding window unused
  (llama.cpp disables it).
* gemma2: gemma3's recipe without QK norm; even layers slide (window attention.sliding_window,
  default 4096), rope base rope.freq_base_swa (default: the global one) on them; attention scores
  soft-capped after the scale (cap * tanh(s / cap), attn_logit_softcapping, default 50) and the
  final logits likewise (final_logit_softcapping, default 30).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

__all__ = ["ModelConfig", "ReferenceModel", "clear_cache", "open_gguf", "read_config"]

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")
NEOX_ARCHS = ("qwen2", "qwen3", "phi3", "gemma2", "gemma3")

# llama.cpp hardcodes these for gemma3 when the file does not say otherwise.
GEMMA3_SWA_PERIOD = 6
GEMMA3_ROPE_BASE_LOCAL = 10000.0
# and these for gemma2 (llama.cpp's defaults and its fixed pattern: even layers slide)
GEMMA2_SWA_PERIOD = 2
GEMMA2_WINDOW = 4096
GEMMA2_ATTN_SOFTCAP = 50.0
GEMMA2_FINAL_SOFTCAP = 30.0

F64 = np.float64
Array = np.ndarray[Any, np.dtype[Any]]


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_layer: int
    d_model: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    d_ff: int
    vocab_size: int
    context_length: int
    rms_eps: float
    rope_base: float
    rope_base_local: float  # rope base of sliding-window layers (gemma3)
    n_rot: int  # leading dims of each head that RoPE rotates
    rope_neox: bool  # True: rotate (x[i], x[i + n_rot/2]); False: (x[2i], x[2i+1])
    rope_scale: float  # linear rope scaling factor of global layers (positions / factor)
    rope_scale_local: float  # that of sliding-window layers (gemma3: 1, else rope_scale)
    sliding_window: int  # 0: no sliding-window layers
    sliding_layers: tuple[bool, ...]  # per layer: uses the window and the local rope base
    attn_scale: float
    embed_scale: float  # gemma3: sqrt(d_model)
    final_logit_softcap: float  # 0: none
    attn_logit_softcap: float  # 0: none
    tied_output: bool
    rope_freq_factors: tuple[float, ...] | None  # llama3's rope_freqs: frequency divisors
    bos_id: int | None
    eos_id: int | None

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_layers[layer]


class _FastReader(GGUFReader):
    """GGUFReader whose field parsing slices a plain ndarray view of the mapping.

    The stock reader slices the np.memmap itself for every value; on Gemma 3's 262144-token
    vocabulary that alone takes ~10 s. Same parser, same results, ~4x faster.
    """

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Array:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self.data.view(np.ndarray)
            self.__dict__["_plain"] = plain
        dt = np.dtype(dtype)
        count = int(count)
        arr = plain[offset : offset + dt.itemsize * count].view(dt)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr.view(arr.dtype.newbyteorder(order))


def open_gguf(path: str | Path) -> GGUFReader:
    """A GGUFReader for path (the faster subclass when this gguf version allows it)."""
    try:
        return _FastReader(path)
    except (AttributeError, TypeError):  # a gguf release whose private _get differs
        return GGUFReader(path)


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_config(reader: GGUFReader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported architecture {arch!r}; expected one of {SUPPORTED_ARCHS}")

    def key(name: str, default: Any = None, required: bool = False) -> Any:
        v = _field(reader, f"{arch}.{name}", default)
        if v is None and required:
            raise ValueError(f"missing metadata {arch}.{name}")
        return v

    n_layer = int(key("block_count", required=True))
    d_model = int(key("embedding_length", required=True))
    n_head = int(key("attention.head_count", required=True))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    head_dim_k = int(key("attention.key_length", d_model // n_head))
    head_dim_v = int(key("attention.value_length", d_model // n_head))
    d_ff = int(key("feed_forward_length", required=True))
    eps = float(key("attention.layer_norm_rms_epsilon", 1e-5))
    rope_base = float(key("rope.freq_base", 10000.0))
    n_rot = int(key("rope.dimension_count", head_dim_k))
    context = int(key("context_length", 0))
    scaling_type = key("rope.scaling.type", None)
    # a factor without a type is linear (as the native loader reads it)
    rope_scale = float(key("rope.scaling.factor", 1.0)) if scaling_type in (None, "linear") else 1.0
    if scaling_type not in (None, "none", "linear"):
        raise ValueError(f"unsupported rope scaling {scaling_type!r}")
    if rope_scale <= 0:
        rope_scale = 1.0

    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embd is None:
        raise ValueError("missing tensor token_embd.weight")
    vocab = int(embd.shape[1])
    tied = not any(t.name == "output.weight" for t in reader.tensors)

    sliding_window = 0
    sliding: list[bool] = [False] * n_layer
    rope_base_local = rope_base
    embed_scale = 1.0
    attn_softcap = final_softcap = 0.0
    if arch in ("gemma2", "gemma3"):
        if arch == "gemma3":
            sliding_window = int(key("attention.sliding_window", 0))
            rope_base_local = float(key("rope.freq_base_swa", GEMMA3_ROPE_BASE_LOCAL))
            period = GEMMA3_SWA_PERIOD
        else:
            sliding_window = int(key("attention.sliding_window", 0) or GEMMA2_WINDOW)
            rope_base_local = float(key("rope.freq_base_swa", rope_base))
            period = GEMMA2_SWA_PERIOD
            attn_softcap = float(key("attn_logit_softcapping", GEMMA2_ATTN_SOFTCAP))
            final_softcap = float(key("final_logit_softcapping", GEMMA2_FINAL_SOFTCAP))
        embed_scale = math.sqrt(d_model)
        pattern = key("attention.sliding_window_pattern", None)
        if isinstance(pattern, int) and pattern >= 0:
            period = pattern
        # layer i slides when i % period < period - 1 (llama.cpp's set_swa_pattern)
        sliding = [period <= 1 or i % period < period - 1 for i in range(n_layer)]
        if sliding_window <= 0:
            sliding = [False] * n_layer
    elif arch == "llama":
        sliding_window = int(key("attention.sliding_window", 0))  # Mistral: every layer
        sliding = [sliding_window > 0] * n_layer

    scale = key("attention.scale", None)
    attn_scale = float(scale) if scale else 1.0 / math.sqrt(head_dim_k)
    if arch == "gemma2" and n_layer == 46 and not scale:  # llama.cpp: Gemma 2 27B
        attn_scale = 1.0 / math.sqrt(d_model // n_head)
    ff = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    freq_factors = None
    if ff is not None:
        vals = np.asarray(dequantize(ff.data, GGMLQuantizationType(ff.tensor_type)), dtype=F64)
        freq_factors = tuple(float(v) for v in vals.reshape(-1))
        if len(freq_factors) != n_rot // 2:
            raise ValueError(f"rope_freqs has {len(freq_factors)} values, expected {n_rot // 2}")
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    if n_head % n_head_kv != 0:
        raise ValueError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    if n_rot % 2 != 0 or n_rot > head_dim_k:
        raise ValueError(f"bad rope.dimension_count {n_rot} for head dim {head_dim_k}")

    return ModelConfig(
        arch=arch,
        n_layer=n_layer,
        d_model=d_model,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        d_ff=d_ff,
        vocab_size=vocab,
        context_length=context,
        rms_eps=eps,
        rope_base=rope_base,
        rope_base_local=rope_base_local,
        n_rot=n_rot,
        rope_neox=arch in NEOX_ARCHS,
        rope_scale=rope_scale,
        rope_scale_local=1.0 if arch == "gemma3" else rope_scale,
        sliding_window=sliding_window,
        sliding_layers=tuple(sliding),
        attn_scale=attn_scale,
        embed_scale=embed_scale,
        final_logit_softcap=final_softcap,
        attn_logit_softcap=attn_softcap,
        tied_output=tied,
        rope_freq_factors=freq_factors,
        bos_id=None if bos is None else int(bos),
        eos_id=None if eos is None else int(eos),
    )


@dataclass
class _Layer:
    attn_norm: Array
    wq: Array  # (n_head * head_dim_k, d_model)
    wk: Array
    wv: Array
    wo: Array  # (d_model, n_head * head_dim_v)
    ffn_norm: Array
    w_gate: Array  # (d_ff, d_model)
    w_up: Array
    w_down: Array  # (d_model, d_ff)
    q_norm: Array | None = None
    k_norm: Array | None = None
    bq: Array | None = None  # biases (qwen2), added after the products
    bk: Array | None = None
    bv: Array | None = None
    bo: Array | None = None
    post_attn_norm: Array | None = None
    post_ffn_norm: Array | None = None
    # activation format per matrix (see act_format): which 8-bit rounding its input gets
    fmt: dict[str, int] = field(default_factory=dict)


@dataclass
class _Weights:
    config: ModelConfig
    token_embd: Array  # (vocab, d_model) float32
    output: Array  # (vocab, d_model) float32; token_embd itself when tied
    output_norm: Array
    layers: list[_Layer]
    output_fmt: int = 0


def _load_weights(path: Path) -> _Weights:
    reader = open_gguf(path)
    cfg = read_config(reader)
    tensors = {t.name: t for t in reader.tensors}

    def raw(name: str) -> Array:
        t = tensors.get(name)
        if t is None:
            raise ValueError(f"missing tensor {name}")
        data = dequantize(t.data, GGMLQuantizationType(t.tensor_type))
        shape = tuple(int(n) for n in reversed(t.shape))  # numpy order: (ne[1], ne[0])
        return np.asarray(data, dtype=np.float32).reshape(shape)

    def mat(name: str, rows: int, cols: int) -> Array:
        a = raw(name)
        if a.shape != (rows, cols):
            raise ValueError(f"{name}: shape {a.shape}, expected {(rows, cols)}")
        return a.astype(F64)

    def vec(name: str, n: int) -> Array:
        a = raw(name).reshape(-1)
        if a.shape != (n,):
            raise ValueError(f"{name}: shape {a.shape}, expected {(n,)}")
        return a.astype(F64)

    def opt_vec(name: str, n: int) -> Array | None:
        return vec(name, n) if name in tensors else None

    def fmt(name: str) -> int:
        return act_format(int(tensors[name].tensor_type))

    d, hk, hv = cfg.d_model, cfg.head_dim_k, cfg.head_dim_v
    qd, kd, vd = cfg.n_head * hk, cfg.n_head_kv * hk, cfg.n_head_kv * hv
    layers: list[_Layer] = []
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        f = {r: fmt(p + r + ".weight") for r in ("attn_output", "ffn_down")}
        bq = bk = bv = None
        if p + "attn_qkv.weight" in tensors:  # phi3: rows Q | K | V
            qkv = mat(p + "attn_qkv.weight", qd + kd + vd, d)
            wq, wk, wv = qkv[:qd], qkv[qd : qd + kd], qkv[qd + kd :]
            f |= dict.fromkeys(("attn_q", "attn_k", "attn_v"), fmt(p + "attn_qkv.weight"))
            if p + "attn_qkv.bias" in tensors:
                b = vec(p + "attn_qkv.bias", qd + kd + vd)
                bq, bk, bv = b[:qd], b[qd : qd + kd], b[qd + kd :]
        else:
            wq = mat(p + "attn_q.weight", qd, d)
            wk = mat(p + "attn_k.weight", kd, d)
            wv = mat(p + "attn_v.weight", vd, d)
            f |= {r: fmt(p + r + ".weight") for r in ("attn_q", "attn_k", "attn_v")}
        if bq is None:
            bq = opt_vec(p + "attn_q.bias", qd)
            bk = opt_vec(p + "attn_k.bias", kd)
            bv = opt_vec(p + "attn_v.bias", vd)
        if cfg.arch == "phi3":  # ffn_up rows: gate | up
            gu = mat(p + "ffn_up.weight", 2 * cfg.d_ff, d)
            w_gate, w_up = gu[: cfg.d_ff], gu[cfg.d_ff :]
            f |= dict.fromkeys(("ffn_gate", "ffn_up"), fmt(p + "ffn_up.weight"))
        else:
            w_gate = mat(p + "ffn_gate.weight", cfg.d_ff, d)
            w_up = mat(p + "ffn_up.weight", cfg.d_ff, d)
            f |= {r: fmt(p + r + ".weight") for r in ("ffn_gate", "ffn_up")}
        qk_norm = cfg.arch in ("qwen3", "gemma3")
        post = cfg.arch in ("gemma2", "gemma3")
        layers.append(
            _Layer(
                attn_norm=vec(p + "attn_norm.weight", d),
                wq=wq,
                wk=wk,
                wv=wv,
                wo=mat(p + "attn_output.weight", d, cfg.n_head * hv),
                ffn_norm=vec(p + "ffn_norm.weight", d),
                w_gate=w_gate,
                w_up=w_up,
                w_down=mat(p + "ffn_down.weight", d, cfg.d_ff),
                q_norm=vec(p + "attn_q_norm.weight", hk) if qk_norm else None,
                k_norm=vec(p + "attn_k_norm.weight", hk) if qk_norm else None,
                post_attn_norm=vec(p + "post_attention_norm.weight", d) if post else None,
                post_ffn_norm=vec(p + "post_ffw_norm.weight", d) if post else None,
                bq=bq,
                bk=bk,
                bv=bv,
                bo=opt_vec(p + "attn_output.bias", d),
                fmt=f,
            )
        )

    embd = raw("token_embd.weight")
    if embd.shape != (cfg.vocab_size, d):
        raise ValueError(f"token_embd.weight: shape {embd.shape}, expected {(cfg.vocab_size, d)}")
    output = embd if cfg.tied_output else raw("output.weight")
    if output.shape != (cfg.vocab_size, d):
        raise ValueError(f"output.weight: shape {output.shape}, expected {(cfg.vocab_size, d)}")
    return _Weights(
        config=cfg,
        token_embd=embd,
        output=output,
        output_norm=vec("output_norm.weight", d),
        layers=layers,
        output_fmt=fmt("token_embd.weight" if cfg.tied_output else "output.weight"),
    )


# Dequantized weights per file for the life of the process: dequantizing a real model takes
# seconds and tests build many ReferenceModels. Keyed by path, size and mtime so a rewritten
# fixture is read again.
_CACHE: dict[tuple[str, int, int], _Weights] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 4


def _cached_weights(path: Path) -> _Weights:
    st = os.stat(path)
    k = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        w = _CACHE.get(k)
        if w is not None:
            _CACHE[k] = _CACHE.pop(k)  # most recently used last
            return w
    w = _load_weights(path)
    with _CACHE_LOCK:
        _CACHE[k] = w
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
    return w


def clear_cache() -> None:
    """Drop the dequantized weights kept for the process."""
    with _CACHE_LOCK:
        _CACHE.clear()


# Activation rounding, mirroring native/src/backend/act_quant.h: before a product with a
# quantized weight, every backend (and llama.cpp) rounds the activations to 8 bits.
ACT_F32, ACT_Q8_32, ACT_Q8_256 = 0, 1, 2
_Q8_32_TYPES = {2, 3, 6, 7, 8, 20}  # Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL
_Q8_256_TYPES = {10, 11, 12, 13, 14, 23}  # Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS


def act_format(weight_type: int) -> int:
    if weight_type in _Q8_32_TYPES:
        return ACT_Q8_32
    if weight_type in _Q8_256_TYPES:
        return ACT_Q8_256
    return ACT_F32


def round_activations(x: Array, fmt: int) -> Array:
    """The values the 8-bit activations represent (float32 arithmetic, as the C code)."""
    if fmt == ACT_F32:
        return x
    shape = x.shape
    blk = 32 if fmt == ACT_Q8_32 else 256
    b = x.astype(np.float32).reshape(-1, blk)
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmt == ACT_Q8_32:
            amax = np.abs(b).max(axis=1, keepdims=True)
            d = amax / np.float32(127)
            inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            dh = d.astype(np.float16).astype(np.float32)
            q = b * inv
            q = np.sign(q) * np.floor(np.abs(q) + np.float32(0.5))  # roundf: half away from 0
            out = q * dh
        else:
            idx = np.abs(b).argmax(axis=1)
            maxv = b[np.arange(b.shape[0]), idx][:, None]
            iscale = np.where(maxv != 0, np.float32(-127) / maxv, np.float32(0)).astype(np.float32)
            d = np.where(maxv != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
            q = np.minimum(np.rint(iscale * b), np.float32(127))
            out = q * d
    return out.astype(x.dtype).reshape(shape)


def _rms_norm(x: Array, w: Array, eps: float) -> Array:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def _gelu_tanh(x: Array) -> Array:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _silu(x: Array) -> Array:
    return x / (1.0 + np.exp(-x))


def _rope(x: Array, pos: Array, n_rot: int, base: float, neox: bool,
          freq_factors: tuple[float, ...] | None = None) -> Array:
    """Rotate the first n_rot dims of each head. x: (n, heads, head_dim); pos: (n,)."""
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=F64) * 2.0 / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=F64)
    ang = pos.astype(F64)[:, None] * inv_freq[None, :]  # (n, half)
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        a = x[..., :half]
        b = x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a = x[..., 0:n_rot:2]
        b = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


class ReferenceModel:
    """Float64 numpy forward pass of a GGUF of SUPPORTED_ARCHS, for checking the native core.

    ``forward(ids)`` runs the whole sequence with causal attention from position 0 and returns
    the logits of every position, shape (len(ids), vocab_size), float64.
    """

    def __init__(self, path: str | Path, act_quant: bool = True) -> None:
        # act_quant: round activations to 8 bits before quantized products, as every geist
        # backend and llama.cpp do; False gives the pure float64 model.
        self.act_quant = act_quant
        self.path = Path(path)
        self._w = _cached_weights(self.path)
        self.config: ModelConfig = self._w.config

    def embed(self, ids: Sequence[int]) -> Array:
        idx = np.asarray(list(ids), dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError("ids must be a non-empty sequence of token ids")
        if idx.min() < 0 or idx.max() >= self.config.vocab_size:
            raise ValueError(f"token id out of range [0, {self.config.vocab_size})")
        return self._w.token_embd[idx].astype(F64) * self.config.embed_scale

    def hidden(self, ids: Sequence[int]) -> Array:
        """Final hidden states after output_norm, shape (n, d_model)."""
        cfg = self.config
        x = self.embed(ids)
        n = x.shape[0]
        pos = np.arange(n)
        for i, layer in enumerate(self._w.layers):
            x = self._block(x, pos, i, layer)
        return _rms_norm(x, self._w.output_norm, cfg.rms_eps)

    def forward(self, ids: Sequence[int]) -> Array:
        h = self._act(self.hidden(ids), self._w.output_fmt)
        out = self._w.output
        logits = np.empty((h.shape[0], out.shape[0]), dtype=F64)
        step = 16384  # widen the float32 output matrix to float64 a slice at a time
        for s in range(0, out.shape[0], step):
            logits[:, s : s + step] = h @ out[s : s + step].astype(F64).T
        cap = self.config.final_logit_softcap
        if cap > 0:
            logits = cap * np.tanh(logits / cap)
        return logits

    __call__ = forward

    def _act(self, x: Array, fmt: int) -> Array:
        return round_activations(x, fmt) if self.act_quant else x

    def _block(self, x: Array, pos: Array, li: int, w: _Layer) -> Array:
        cfg = self.config
        n = x.shape[0]
        hk, hv = cfg.head_dim_k, cfg.head_dim_v
        sliding = cfg.is_sliding(li)

        h = _rms_norm(x, w.attn_norm, cfg.rms_eps)
        f = w.fmt
        q = (self._act(h, f["attn_q"]) @ w.wq.T).reshape(n, cfg.n_head, hk)
        k = (self._act(h, f["attn_k"]) @ w.wk.T).reshape(n, cfg.n_head_kv, hk)
        v = (self._act(h, f["attn_v"]) @ w.wv.T).reshape(n, cfg.n_head_kv, hv)
        if w.bq is not None:
            q = q + w.bq.reshape(cfg.n_head, hk)
        if w.bk is not None:
            k = k + w.bk.reshape(cfg.n_head_kv, hk)
        if w.bv is not None:
            v = v + w.bv.reshape(cfg.n_head_kv, hv)
        if w.q_norm is not None:
            q = _rms_norm(q, w.q_norm, cfg.rms_eps)
        if w.k_norm is not None:
            k = _rms_norm(k, w.k_norm, cfg.rms_eps)
        if sliding:
            base, rpos = cfg.rope_base_local, pos.astype(F64) / cfg.rope_scale_local
        else:
            base, rpos = cfg.rope_base, pos.astype(F64) / cfg.rope_scale
        ff = cfg.rope_freq_factors
        q = _rope(q, rpos, cfg.n_rot, base, cfg.rope_neox, ff)
        k = _rope(k, rpos, cfg.n_rot, base, cfg.rope_neox, ff)

        group = cfg.n_head // cfg.n_head_kv
        k = np.repeat(k, group, axis=1)  # head h reads KV head h // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * cfg.attn_scale
        if cfg.attn_logit_softcap > 0:
            c = cfg.attn_logit_softcap
            scores = c * np.tanh(scores / c)
        diff = pos[:, None] - pos[None, :]  # query - key
        allowed = diff >= 0
        if sliding:
            allowed &= diff < cfg.sliding_window
        scores = np.where(allowed[None, :, :], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", p, v).reshape(n, cfg.n_head * hv)
        attn = self._act(attn, f["attn_output"]) @ w.wo.T
        if w.bo is not None:
            attn = attn + w.bo
        if w.post_attn_norm is not None:
            attn = _rms_norm(attn, w.post_attn_norm, cfg.rms_eps)
        x = x + attn

        h = _rms_norm(x, w.ffn_norm, cfg.rms_eps)
        gate = self._act(h, f["ffn_gate"]) @ w.w_gate.T
        up = self._act(h, f["ffn_up"]) @ w.w_up.T
        act = _gelu_tanh(gate) if cfg.arch in ("gemma2", "gemma3") else _silu(gate)
        down = self._act(act * up, f["ffn_down"]) @ w.w_down.T
        if w.post_ffn_norm is not None:
            down = _rms_norm(down, w.post_ffn_norm, cfg.rms_eps)
        return x + down
