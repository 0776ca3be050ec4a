"""Constrained output (geist.h "geist_matcher", docs/GRAMMAR.md): GBNF grammars and JSON Schema.

`grammar_request(grammar=..., json_schema=...)` turns the front ends' keywords into the request's
(text, kind); `Matcher` drives the core's matcher directly (own sampling loops, tests, benches).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ._binding import ERR_BUFFER_TOO_SMALL as BUFFER_TOO_SMALL
from ._binding import check, ffi, lib
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .model import Model

GBNF: int = 1
JSON_SCHEMA: int = 2

__all__ = [
    "GBNF",
    "JSON_SCHEMA",
    "Matcher",
    "check_grammar",
    "grammar_request",
    "json_schema_to_gbnf",
]


def grammar_request(
    grammar: str | None = None, json_schema: str | dict[str, Any] | None = None
) -> tuple[str, int] | None:
    """(text, kind) for a request, or None. At most one of grammar / json_schema."""
    if grammar is not None and json_schema is not None:
        raise InvalidArgumentError("pass grammar= or json_schema=, not both")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise InvalidArgumentError("grammar= must be GBNF text (str)")
        return grammar, GBNF
    if json_schema is not None:
        text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        return text, JSON_SCHEMA
    return None


def check_grammar(text: str | bytes, kind: int, model: Model | None = None) -> None:
    """Compiles without generating; raises InvalidArgumentError with the core's message. Bytes
    are passed as they are (a grammar file that is not valid UTF-8 gets the core's error)."""
    ptr = model._require() if model is not None else ffi.NULL
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    check(lib.geist_grammar_check(ptr, data, kind), "grammar")


class Matcher:
    """A grammar matcher over a model's vocabulary: `mask()` (bool array of n_vocab), `accept()`."""

    def __init__(self, model: Model, text: str, kind: int = GBNF) -> None:
        self._model = model
        out = ffi.new("geist_matcher **")
        check(
            lib.geist_matcher_create(model._require(), text.encode("utf-8"), kind, out), "grammar"
        )
        self._ptr = ffi.gc(out[0], lib.geist_matcher_free)
        self.n_vocab = model.n_vocab
        self._words = np.zeros((self.n_vocab + 31) // 32, dtype=np.uint32)

    def mask_words(self) -> np.ndarray:
        """The allowed tokens as uint32 words (bit id % 32 of word id // 32); a fresh copy."""
        buf = ffi.from_buffer("uint32_t[]", self._words)
        check(lib.geist_matcher_mask(self._ptr, buf, len(self._words)), "grammar mask")
        return self._words.copy()

    def mask(self) -> np.ndarray:
        """Bool array of n_vocab: True where the token is allowed."""
        w = self.mask_words()
        bits = np.unpackbits(w.view(np.uint8), bitorder="little")
        return bits[: self.n_vocab].astype(bool)

    def accept(self, token: int) -> None:
        check(lib.geist_matcher_accept(self._ptr, int(token)), "grammar accept")

    @property
    def can_end(self) -> bool:
        return bool(lib.geist_matcher_can_end(self._ptr))

    @property
    def is_done(self) -> bool:
        return bool(lib.geist_matcher_is_done(self._ptr))


def json_schema_to_gbnf(schema: str | dict[str, Any]) -> str:
    """The GBNF grammar geist runs for a JSON schema (compact JSON, properties in order)."""
    text = schema if isinstance(schema, str) else json.dumps(schema)
    n = ffi.new("size_t *")
    st = lib.geist_json_schema_to_gbnf(text.encode("utf-8"), ffi.NULL, 0, n)
    if st not in (0, BUFFER_TOO_SMALL):
        check(st, "json schema")
    buf = ffi.new("char[]", n[0] + 1)
    check(lib.geist_json_schema_to_gbnf(text.encode("utf-8"), buf, n[0] + 1, n), "json schema")
    return str(ffi.string(buf).decode("utf-8"))
