"""The native sampler chain as a Python object.

penalties -> logit bias / hook -> temperature -> top-k -> top-p -> min-p -> draw, with a seeded
generator inside the sampler (same seed, options, history and logits -> same tokens, on any
thread). Exact semantics: native/src/sample/sampler.h.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from geist._binding import check, ffi, lib
from geist.errors import StateError


@dataclass
class SamplerOptions:
    """The sampler chain's settings (geist_sampler_options in geist.h): the one sampling type
    of the SDK (Sampler, generate, chat and submit all take it). temperature 0 is greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int = 0

    def to_native(self) -> Any:
        opts = ffi.new("geist_sampler_options *")
        lib.geist_sampler_options_default(opts)
        for f in fields(self):
            setattr(opts, f.name, getattr(self, f.name))
        return opts

    def replace(self, **changes: float | int) -> SamplerOptions:
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise TypeError(f"unknown sampler options: {sorted(unknown)}")
        return SamplerOptions(**{**asdict(self), **changes})


_FIELDS = tuple(f.name for f in fields(SamplerOptions))


class Sampler:
    """A geist_sampler for logits rows of n_vocab floats. Buffers are allocated once here."""

    def __init__(self, n_vocab: int, options: SamplerOptions | None = None,
                 **settings: float | int) -> None:
        """options, then any SamplerOptions field as a keyword (temperature=0.0, seed=3...)."""
        self.n_vocab = int(n_vocab)
        self._opts = (options or SamplerOptions()).replace(**settings)
        out = ffi.new("geist_sampler **")
        check(lib.geist_sampler_create(self.n_vocab, self._opts.to_native(), out))
        self._ptr: Any = ffi.gc(out[0], lib.geist_sampler_free)
        self._out = ffi.new("int32_t *")

    @property
    def options(self) -> dict[str, float | int]:
        return asdict(self._opts)

    def set_options(self, **changes: float | int) -> None:
        """Changes options; history and generator state are kept unless `seed` changes."""
        opts = self._opts.replace(**changes)
        check(lib.geist_sampler_set_options(self._require(), opts.to_native()))
        self._opts = opts

    def sample(self, logits: np.ndarray) -> int:
        """Draws a token id from one row of n_vocab logits (not modified) and records it."""
        row = np.ascontiguousarray(logits, dtype=np.float32)
        if row.ndim != 1 or row.shape[0] != self.n_vocab:
            raise ValueError(f"logits must have shape ({self.n_vocab},), got {row.shape}")
        check(lib.geist_sampler_sample(self._require(), ffi.from_buffer("float[]", row), self._out))
        return int(self._out[0])

    def accept(self, token: int) -> None:
        """Records a token in the penalty history without drawing (e.g. prompt tokens)."""
        lib.geist_sampler_accept(self._require(), int(token))

    def set_logit_bias(self, bias: Mapping[int, float]) -> None:
        """Replaces the additive logit bias; float('-inf') bans a token, {} clears it."""
        ids = ffi.new("int32_t[]", [int(k) for k in bias])
        vals = ffi.new("float[]", [float(v) for v in bias.values()])
        check(lib.geist_sampler_set_logit_bias(self._require(), ids, vals, len(bias)))

    def reset(self) -> None:
        """Clears the history and reseeds the generator with the options' seed."""
        lib.geist_sampler_reset(self._require())

    def _require(self) -> Any:
        if self._ptr is None:
            raise StateError("sampler is closed")
        return self._ptr

    def close(self) -> None:
        """Frees the native sampler now (otherwise garbage collection does)."""
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            ffi.gc(ptr, None)  # detach the collector's free
            lib.geist_sampler_free(ptr)
