"""What a generation request carries and returns: streamed pieces, the result, the context policy.

There is one generation loop, in the native core (gen/ and the runtime): `Session.generate`,
`Session.chat` and `Session.submit` all queue a request on the engine's runtime and wait for or
stream its events (geist.runtime). End tokens, stop strings and their hold-back, the finish
reasons and the conversation policy (messages -> KV reuse -> trimming) live there only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from geist.actions import ActionCall
from geist.errors import GeistError
from geist.sampling import SamplerOptions

__all__ = ["ContextPolicy", "GenerationResult", "Piece", "SamplerOptions"]


@dataclass
class Piece:
    """One streamed piece of generated text and the token ids that completed it."""

    text: str
    ids: list[int] = field(default_factory=list)


@dataclass
class ContextPolicy:
    """How a chat (messages) request fits its session (geist_context_policy in geist.h).

    trim: drop the oldest turns when the conversation plus reply_reserve does not fit the cap
    (a trim drops a quarter of the cap more than needed, so the next turns reuse the KV again);
    keep_first: leading messages never dropped (-1: the leading system messages, the persona);
    keep_last: messages at the end never dropped; reply_reserve: tokens kept free for the reply
    (-1: max_tokens capped to half of max_seq_len)."""

    trim: bool = True
    keep_first: int = -1
    keep_last: int = 1
    reply_reserve: int = -1

    def fill(self, native: Any) -> None:
        native.trim = 1 if self.trim else 0
        native.keep_first = self.keep_first
        native.keep_last = self.keep_last
        native.reply_reserve = self.reply_reserve


@dataclass
class GenerationResult:
    """The end of a request. `text` always equals the concatenation of the streamed pieces.

    finish_reason: "stop" (an end token or a stop string), "length" (max_tokens), "capacity"
    (the session's max_seq_len), "cancelled", "grammar" (the request's grammar allowed no
    token, or could not be completed within max_tokens), or "failed" (then `error` is set).
    n_prompt: prompt tokens the request ran; n_reused: tokens of the session's KV it kept;
    n_dropped: messages the context policy dropped. action: with `actions=`, the call the
    reply made (None: it only spoke); `text` is the speech then."""

    text: str = ""
    ids: list[int] = field(default_factory=list)
    finish_reason: str = ""
    n_prompt: int = 0
    n_reused: int = 0
    n_dropped: int = 0
    error: GeistError | None = None
    first_token_s: float | None = None  # seconds from submit to the first token event
    elapsed_s: float = 0.0
    action: ActionCall | None = None

    def json(self) -> Any:
        """The reply parsed as JSON (a json_schema request's output); raises ValueError when the
        text is not JSON (e.g. a reply that finished with "length" or "grammar")."""
        import json as _json

        return _json.loads(self.text)
