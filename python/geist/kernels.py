"""Tensor type kernels of the native core (cpu_scalar dequantize and dot), for tests and tools.

`type_id` is a GGML tensor type id as in GGUF files (`gguf.GGMLQuantizationType` values).
"""

from __future__ import annotations

import numpy as np

from geist._binding import check, ffi, lib

__all__ = ["dequantize", "vec_dot"]


def _raw_bytes(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """A C-contiguous uint8 view (or copy) of the raw block bytes."""
    if isinstance(data, np.ndarray):
        arr = np.ascontiguousarray(data)
        return arr.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def dequantize(
    type_id: int, data: bytes | bytearray | memoryview | np.ndarray, n: int
) -> np.ndarray:
    """Dequantizes the first `n` values of tensor type `type_id` held in `data` to float32.

    `n` must be a multiple of the type's block size and `data` must hold at least the bytes of
    `n` values; otherwise the native call fails and a `geist.GeistError` subclass is raised.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    src = _raw_bytes(data)
    out = np.empty(n, dtype=np.float32)
    check(
        lib.geist_dequantize(
            int(type_id), ffi.from_buffer(src), src.nbytes, ffi.from_buffer("float[]", out), n
        )
    )
    return out


def vec_dot(
    type_id: int,
    data: bytes | bytearray | memoryview | np.ndarray,
    x: np.ndarray,
    backend: str | None = None,
) -> float:
    """Dot product of the first `len(x)` values of type `type_id` in `data` with `x`.

    Computed as the named backend's matrix kernels compute it (None: cpu_scalar).
    """
    src = _raw_bytes(data)
    xv = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = ffi.new("float *")
    name = ffi.NULL if backend is None else ffi.new("char[]", backend.encode("utf-8"))
    check(
        lib.geist_vec_dot(
            name,
            int(type_id),
            ffi.from_buffer(src),
            src.nbytes,
            ffi.from_buffer("float[]", xv),
            xv.size,
            out,
        )
    )
    return float(out[0])
