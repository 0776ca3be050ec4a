"""cpu_scalar dequantize / vec_dot kernels against the gguf package's numpy dequantization.

The gguf package (gguf.quants) is the oracle for block layouts. Every supported type is checked on
random blocks, on tensors of the two real models, and through vec_dot against a float64 dot.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import pytest

import geist
from geist.kernels import dequantize, vec_dot

T = gguf.GGMLQuantizationType

# Types geist computes with. gguf can quantize the first eight; the rest it only dequantizes.
QUANTIZABLE = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
RAW_ONLY = [T.Q4_K, T.Q6_K, T.Q5_K, T.Q3_K, T.Q2_K, T.IQ4_NL, T.IQ4_XS]
SUPPORTED = QUANTIZABLE + RAW_ONLY

# Byte offsets of each raw-only type's f16 scales (d, and dmin where it has one): random bytes
# there could be inf/NaN, so random_raw_blocks writes finite scales at these offsets.
F16_AT: dict[T, tuple[int, ...]] = {
    T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,), T.Q3_K: (108,), T.Q2_K: (80, 82),
    T.IQ4_NL: (0,), T.IQ4_XS: (0,),
}  # fmt: skip



def block_geometry(qtype: T) -> tuple[int, int]:
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    return int(block), int(nbytes)


def ref_dequantize(qtype: T, raw: np.ndarray, n: int) -> np.ndarray:
    """The oracle: gguf's numpy dequantization of the raw bytes of n values (one flat row)."""
    block, nbytes = block_geometry(qtype)
    rows = np.ascontiguousarray(raw, dtype=np.uint8).reshape(1, n // block * nbytes)
    return np.asarray(gguf.quants.dequantize(rows, qtype), dtype=np.float32).reshape(-1)


def random_f16(rng: np.random.Generator, size: int, lo: float, hi: float) -> np.ndarray:
    """Finite f16 scales with random sign and log-uniform magnitude in [lo, hi]."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), size))
    sign = rng.choice(np.array([-1.0, 1.0]), size)
    return (sign * mag).astype(np.float16)


def random_raw_blocks(qtype: T, rng: np.random.Generator, n_blocks: int) -> np.ndarray:
    """Random valid blocks for types gguf cannot quantize: random bytes, finite f16 scales."""
    _, nbytes = block_geometry(qtype)
    blocks = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for at in F16_AT[qtype]:
        blocks[:, at : at + 2] = random_f16(rng, n_blocks, 1e-4, 2e-2).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(-1)


def random_row(qtype: T, rng: np.random.Generator, n: int) -> np.ndarray:
    """Raw bytes of a random row of n values of qtype."""
    if qtype in RAW_ONLY:
        return random_raw_blocks(qtype, rng, n // block_geometry(qtype)[0])
    data = rng.standard_normal(n).astype(np.float32) * np.float32(rng.uniform(0.01, 3.0))
    # a few outliers and tiny values (f16 subnormals) so the scales and f16 paths are exercised
    idx = rng.integers(0, n, size=max(1, n // 16))
    data[idx] *= np.float32(20.0)
    data[rng.integers(0, n)] = np.float32(3e-6)
    q = gguf.quants.quantize(data.reshape(1, n), qtype)
    return np.ascontiguousarray(q).reshape(-1).view(np.uint8)


def lengths(qtype: T) -> list[int]:
    """Odd numbers of blocks (and odd lengths for the one-value-per-block float types)."""
    block, _ = block_geometry(qtype)
    if block == 1:
        return [1, 7, 37, 129, 577]
    return [block * k for k in (1, 3, 7, 13)]


# --------------------------------------------------------------------------------------------- #
# (a) random blocks


@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda t: t.name)
def test_dequantize_random_blocks_match_gguf(qtype: T) -> None:
    rng = np.random.default_rng(1000 + int(qtype))
    for n in lengths(qtype):
        raw = random_row(qtype, rng, n)
        got = dequantize(int(qtype), raw, n)
        want = ref_dequantize(qtype, raw, n)
        assert np.all(np.isfinite(want)) and np.any(want != 0)
        # Exact: both sides convert f16 exactly and do the same float32 operations in the same
        # order (scale products first, no fused multiply-add), so every type matches bit for bit.
        np.testing.assert_array_equal(got, want, err_msg=f"{qtype.name} n={n}")


def test_f16_all_finite_bit_patterns() -> None:
    # every finite half, including subnormals and -0, converts exactly
    bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    bits = bits[(bits & 0x7C00) != 0x7C00]
    got = dequantize(int(T.F16), bits.view(np.uint8), bits.size)
    want = bits.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda t: t.name)
def test_unaligned_and_multirow(qtype: T) -> None:
    # blocks at an odd address (GGUF blocks of 18/20/22/34/210 bytes are unaligned anyway)
    rng = np.random.default_rng(7 + int(qtype))
    block, _ = block_geometry(qtype)
    n = block * 5 if block > 1 else 41
    rows = [random_row(qtype, rng, n) for _ in range(3)]
    flat = np.concatenate(rows)
    buf = np.empty(flat.size + 1, dtype=np.uint8)
    buf[1:] = flat
    shifted = buf[1:]
    assert shifted.ctypes.data % 2 == 1
    got = dequantize(int(qtype), shifted, 3 * n)
    want = np.concatenate([ref_dequantize(qtype, r, n) for r in rows])
    np.testing.assert_array_equal(got, want)
    # a short prefix of the buffer: only the first row's blocks are read
    np.testing.assert_array_equal(dequantize(int(qtype), shifted, n), want[:n])


# --------------------------------------------------------------------------------------------- #
# (b) real tensors


@dataclass(frozen=True)
class TensorRef:
    name: str
    qtype: T
    shape: tuple[int, ...]  # GGUF order: shape[0] is the row length
    offset: int  # absolute byte offset in the file


def _model_path(attr: str) -> Path:
    from geist import models

    # install=False: a test never runs pip (scripts/setup.sh fetches the models)
    try:
        path = Path(getattr(models, attr)(install=False))
    except FileNotFoundError as e:
        pytest.skip(f"model not installed: {e}")
    return path


def _scan_tensors(path: Path) -> list[TensorRef]:
    """Tensor infos of a GGUF v2/v3 file, skipping metadata values without decoding them.

    gguf.GGUFReader decodes every metadata array element, which takes ~12 s for Gemma 3's
    262k-token vocabulary; this scan needs a fraction of a second. It is checked against
    GGUFReader on SmolLM2 below.
    """
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert mm[:4] == b"GGUF"
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
        assert version in (2, 3)
        pos = 24
        alignment = 32

        def read_str(p: int) -> tuple[bytes, int]:
            (ln,) = struct.unpack_from("<Q", mm, p)
            return mm[p + 8 : p + 8 + ln], p + 8 + ln

        def skip_value(vtype: int, p: int) -> int:
            if vtype in scalar:
                return p + scalar[vtype]
            if vtype == 8:
                return read_str(p)[1]
            assert vtype == 9, vtype
            etype, count = struct.unpack_from("<IQ", mm, p)
            p += 12
            if etype in scalar:
                return p + scalar[etype] * count
            for _ in range(count):
                p = skip_value(etype, p)
            return p

        for _ in range(n_kv):
            key, pos = read_str(pos)
            (vtype,) = struct.unpack_from("<I", mm, pos)
            pos += 4
            if key == b"general.alignment":
                (alignment,) = struct.unpack_from("<I", mm, pos)
            pos = skip_value(vtype, pos)
        infos = []
        for _ in range(n_tensors):
            name, pos = read_str(pos)
            (n_dims,) = struct.unpack_from("<I", mm, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", mm, pos + 4)
            ttype, offset = struct.unpack_from("<IQ", mm, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            infos.append((name.decode(), T(ttype), tuple(int(d) for d in dims), int(offset)))
        data_start = (pos + alignment - 1) // alignment * alignment
    return [TensorRef(nm, tt, dims, data_start + off) for nm, tt, dims, off in infos]


def _sample_rows(t: TensorRef) -> Iterator[int]:
    """A few rows spread over the tensor (first, second, middle, last), not the whole thing."""
    n_rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
    yield from sorted({0, 1 % n_rows, n_rows // 2, n_rows - 1})


def _picked_tensors(tensors: list[TensorRef]) -> list[TensorRef]:
    """The first tensor of each type, plus the token embedding (largest, often its own type)."""
    picked: dict[str, TensorRef] = {}
    seen: set[T] = set()
    for t in tensors:
        if t.qtype not in seen or t.name == "token_embd.weight":
            seen.add(t.qtype)
            picked[t.name] = t
    return list(picked.values())


def _check_real_model(path: Path, expect_types: set[T]) -> None:
    tensors = _scan_tensors(path)
    picked = _picked_tensors(tensors)
    assert {t.qtype for t in picked} == {t.qtype for t in tensors}
    assert expect_types <= {t.qtype for t in picked}
    rng = np.random.default_rng(5)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    for t in picked:
        assert t.qtype in SUPPORTED, f"{t.name}: {t.qtype.name} not supported"
        block, nbytes = block_geometry(t.qtype)
        n = t.shape[0]
        row_bytes = n // block * nbytes
        for r in _sample_rows(t):
            raw = np.array(data[t.offset + r * row_bytes : t.offset + (r + 1) * row_bytes])
            want = ref_dequantize(t.qtype, raw, n)
            got = dequantize(int(t.qtype), raw, n)
            assert np.all(np.isfinite(want)) and np.any(want != 0), f"{t.name} row {r}"
            np.testing.assert_array_equal(got, want, err_msg=f"{t.name} row {r}")
            x = rng.standard_normal(n).astype(np.float32)
            _assert_dot_close(t.qtype, raw, want, x, f"{t.name} row {r}")


def test_scan_matches_gguf_reader() -> None:
    path = _model_path("smollm2_path")
    ours = _scan_tensors(path)
    reader = gguf.GGUFReader(path)
    assert len(ours) == len(reader.tensors)
    for a, b in zip(ours, reader.tensors, strict=True):
        assert a.name == b.name
        assert a.qtype == b.tensor_type
        assert a.shape == tuple(int(d) for d in b.shape)
        assert a.offset == b.data_offset


def test_real_tensors_smollm2() -> None:
    _check_real_model(_model_path("smollm2_path"), {T.Q4_1, T.Q8_0, T.F32})


def test_real_tensors_gemma3() -> None:
    _check_real_model(
        _model_path("gemma3_path"), {T.Q5_0, T.Q4_K, T.Q6_K, T.Q8_0, T.F32}
    )


# --------------------------------------------------------------------------------------------- #
# (c) vec_dot


def _assert_dot_close(qtype: T, raw: np.ndarray, w: np.ndarray, x: np.ndarray, what: str) -> None:
    ref = float(np.dot(w.astype(np.float64), x.astype(np.float64)))
    got = vec_dot(int(qtype), raw, x)
    got_named = vec_dot(int(qtype), raw, x, backend="cpu_scalar")
    assert got == got_named
    # Relative error against |ref|. When the terms cancel (|ref| under 5% of sum |w x|) the bound
    # is taken against 5% of sum |w x| instead: float sums of 32-value runs may be off by a few
    # ulps of the run's magnitude, which no float kernel can shrink relative to a tiny result.
    scale = max(abs(ref), 0.05 * float(np.abs(w.astype(np.float64) * x).sum()))
    assert abs(got - ref) <= 1e-5 * scale, f"{what}: got {got}, float64 {ref}"


@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda t: t.name)
def test_vec_dot_random_close_to_float64(qtype: T) -> None:
    rng = np.random.default_rng(2000 + int(qtype))
    for n in lengths(qtype):
        for _ in range(4):
            raw = random_row(qtype, rng, n)
            w = ref_dequantize(qtype, raw, n)
            x = rng.standard_normal(n).astype(np.float32)
            _assert_dot_close(qtype, raw, w, x, f"{qtype.name} n={n}")


def test_vec_dot_longer_buffer_reads_only_n_values() -> None:
    rng = np.random.default_rng(3)
    raw = random_row(T.Q4_0, rng, 96)
    x = rng.standard_normal(64).astype(np.float32)
    w = ref_dequantize(T.Q4_0, raw[: 2 * 18], 64)
    _assert_dot_close(T.Q4_0, raw, w, x, "prefix")


# --------------------------------------------------------------------------------------------- #
# errors


def test_unsupported_and_unknown_types() -> None:
    raw = np.arange(1, 65, dtype=np.uint8)
    cases = ((int(T.Q8_1), "Q8_1"), (int(T.IQ2_XS), "IQ2_XS"), (99, "99"), (-1, "-1"))
    for type_id, needle in cases:
        with pytest.raises(geist.UnsupportedError, match=needle):
            dequantize(type_id, raw, 32)
        with pytest.raises(geist.UnsupportedError, match=needle):
            vec_dot(type_id, raw, np.ones(32, dtype=np.float32))


def test_bad_sizes_are_refused() -> None:
    rng = np.random.default_rng(4)
    raw = random_row(T.Q8_0, rng, 64)
    with pytest.raises(geist.InvalidArgumentError, match="multiple"):
        dequantize(int(T.Q8_0), raw, 48)
    with pytest.raises(geist.InvalidArgumentError, match="need 102 bytes, got 68"):
        dequantize(int(T.Q8_0), raw, 96)
    with pytest.raises(geist.InvalidArgumentError, match="need"):
        vec_dot(int(T.Q8_0), raw[:67], np.ones(64, dtype=np.float32))
    with pytest.raises(geist.InvalidArgumentError, match="multiple"):
        vec_dot(int(T.Q4_K), random_row(T.Q4_K, rng, 256), np.ones(255, dtype=np.float32))


def test_unknown_backend_is_refused() -> None:
    raw = random_row(T.Q4_0, np.random.default_rng(6), 32)
    with pytest.raises(geist.UnsupportedError, match="no_such_backend"):
        vec_dot(int(T.Q4_0), raw, np.ones(32, dtype=np.float32), backend="no_such_backend")
