"""Text generation over a session: tokenize, prefill, sample, stream text pieces, stop.

The loop is: the sampler chain (native) picks a token from the session's logits, the session
decodes it, the streaming detokenizer (native) turns ids into complete UTF-8 pieces, and stop
strings are held back until it is clear they are not part of a stop sequence.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geist._binding import check, ffi, lib

if TYPE_CHECKING:
    from geist.model import Session


@dataclass
class SamplerOptions:
    """The sampler chain's settings (see geist.h). temperature 0 is greedy."""

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
        for name in (
            "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "frequency_penalty",
            "presence_penalty", "penalty_last_n", "seed",
        ):
            setattr(opts, name, getattr(self, name))
        return opts


@dataclass
class Piece:
    """One streamed piece of generated text and the token ids that completed it."""

    text: str
    ids: list[int] = field(default_factory=list)


@dataclass
class GenerationResult:
    text: str = ""
    ids: list[int] = field(default_factory=list)
    finish_reason: str = ""  # "stop" (end token or stop string), "length" (max_tokens or cap)


class NativeSampler:
    """Owns a geist_sampler (allocated once; no allocation per draw)."""

    def __init__(self, n_vocab: int, options: SamplerOptions) -> None:
        out = ffi.new("geist_sampler **")
        check(lib.geist_sampler_create(n_vocab, options.to_native(), out))
        self._ptr: Any = ffi.gc(out[0], lib.geist_sampler_free)

    def accept(self, token: int) -> None:
        lib.geist_sampler_accept(self._ptr, token)

    def sample(self, logits_ptr: Any) -> int:
        out = ffi.new("int32_t *")
        check(lib.geist_sampler_sample(self._ptr, logits_ptr, out))
        return int(out[0])


class StreamDetokenizer:
    """Ids in, complete UTF-8 text out (never a broken character)."""

    def __init__(self, model_ptr: Any, render_special: bool = False) -> None:
        out = ffi.new("geist_detokenizer **")
        check(lib.geist_detokenizer_create(model_ptr, 1 if render_special else 0, out))
        self._ptr: Any = ffi.gc(out[0], lib.geist_detokenizer_free)
        self._cap = 256
        self._buf = ffi.new("char[]", self._cap)
        self._len = ffi.new("size_t *")

    def push(self, token: int) -> str:
        while True:
            st = lib.geist_detokenizer_push(self._ptr, token, self._buf, self._cap, self._len)
            if st == 8:  # buffer too small: grow and retry (nothing was consumed)
                self._cap = max(self._cap * 2, int(self._len[0]))
                self._buf = ffi.new("char[]", self._cap)
                continue
            check(st)
            return bytes(ffi.buffer(self._buf, self._len[0])).decode("utf-8")

    def flush(self) -> str:
        while True:
            st = lib.geist_detokenizer_flush(self._ptr, self._buf, self._cap, self._len)
            if st == 8:
                self._cap = max(self._cap * 2, int(self._len[0]))
                self._buf = ffi.new("char[]", self._cap)
                continue
            check(st)
            return bytes(ffi.buffer(self._buf, self._len[0])).decode("utf-8")


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of text could still start a stop string."""
    keep = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                keep = max(keep, k)
                break
    return keep


def generate(
    session: Session,
    prompt_ids: Sequence[int],
    max_tokens: int,
    stop: Sequence[str],
    options: SamplerOptions,
    result: GenerationResult,
    stop_at_end_tokens: bool = True,
) -> Iterator[Piece]:
    """Prefills prompt_ids (may be empty if the session already has logits) and streams pieces.
    Fills `result` as it goes; result.finish_reason is set when the iterator ends."""
    model = session.model
    mptr = model._require()
    sampler = NativeSampler(model.n_vocab, options)
    for t in session.history[-options.penalty_last_n:] if options.penalty_last_n > 0 else []:
        sampler.accept(t)
    if prompt_ids:
        session.prefill(prompt_ids)
        for t in list(prompt_ids)[-options.penalty_last_n:] if options.penalty_last_n > 0 else []:
            sampler.accept(t)
    detok = StreamDetokenizer(mptr)
    pending = ""  # text not yet yielded (held back while it may start a stop string)
    pending_ids: list[int] = []
    logits_ptr = ffi.new("const float **")
    for _ in range(max_tokens):
        check(lib.geist_session_logits(session._require(), logits_ptr))
        token = sampler.sample(logits_ptr[0])
        if stop_at_end_tokens and lib.geist_token_is_end(mptr, token):
            result.finish_reason = "stop"
            break
        if session.n_past >= session.max_seq_len:
            result.finish_reason = "length"
            break
        session.decode(token)
        result.ids.append(token)
        pending_ids.append(token)
        pending += detok.push(token)
        hit = [pending.find(s) for s in stop if s and s in pending]
        if hit:
            cut = min(hit)
            piece = pending[:cut]
            if piece:
                result.text += piece
                yield Piece(piece, pending_ids)
            result.finish_reason = "stop"
            return
        keep = _held_back(pending, stop)
        if len(pending) > keep:
            piece = pending[: len(pending) - keep]
            pending = pending[len(pending) - keep:]
            result.text += piece
            yield Piece(piece, pending_ids)
            pending_ids = []
    else:
        result.finish_reason = "length"
    pending += detok.flush()
    if pending:
        result.text += pending
        yield Piece(pending, pending_ids)
