"""The llguidance oracle: the same grammar on the same vocabulary bytes, mask for mask.

geist's vocabulary for grammars is every token whose piece (without special rendering) is not
empty, minus the end-of-generation tokens; llguidance gets exactly those bytes, and every other
token is marked special (special tokens are never allowed by a grammar in either engine). The
end-of-generation tokens are compared as "may the grammar end here": geist's can_end against
llguidance's EOS bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

import geist
from geist.grammar import GBNF, JSON_SCHEMA, Matcher

try:
    import llguidance
    import llguidance.numpy as llnp
except ImportError:  # pragma: no cover - the test extras install it
    llguidance = None
    llnp = None


@dataclass
class Vocab:
    pieces: list[bytes]
    special: list[int]
    eog: list[int]
    n_vocab: int


@lru_cache(maxsize=4)
def vocab_of(model: geist.Model) -> Vocab:
    n = model.n_vocab
    pieces: list[bytes] = []
    special: list[int] = []
    eog: list[int] = []
    for i in range(n):
        try:
            p = model.token_piece(i, render_special=False)
        except geist.GeistError:
            p = b""
        end = model.is_end_token(i)
        if end:
            eog.append(i)
        if not p or end:
            special.append(i)
            p = b"\xff<|geist_special_%d|>" % i  # 0xFF: llguidance's mark of a special token
        pieces.append(p)
    return Vocab(pieces, special, eog, n)


class _Wrap:
    def __init__(self, v: Vocab, model: geist.Model) -> None:
        self._model = model
        self.eos_token_id = v.eog[0] if v.eog else 0
        self.bos_token_id = None
        self.tokens = v.pieces
        self.special_token_ids = v.special

    def __call__(self, s: Any) -> list[int]:
        text = s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
        return [int(t) for t in self._model.tokenize(text, add_special=False)]


@lru_cache(maxsize=4)
def ll_tokenizer(model: geist.Model) -> Any:
    v = vocab_of(model)
    return llguidance.LLTokenizer(
        llguidance.TokenizerWrapper(_Wrap(v, model)), n_vocab=v.n_vocab, eos_token=v.eog or None
    )


# llguidance by default "forces" bytes the grammar fixes: it then allows only the canonical
# tokenization of them (for "ab" only the token "ab", not "a"). geist allows every token whose
# bytes fit, as llama.cpp does; no_forcing makes llguidance's masks exact too.
LL_OPTIONS = '%llguidance {"no_forcing": true}\n'


def ll_grammar(text: str) -> str:
    """llguidance's grammar for GBNF text (through gbnf_lark: parser rules only)."""
    from gbnf_lark import gbnf_to_lark

    return llguidance.LLMatcher.grammar_from_lark(LL_OPTIONS + gbnf_to_lark(text))


def masks(geist_m: Matcher, ll_m: Any, v: Vocab) -> tuple[np.ndarray, np.ndarray]:
    """(geist, llguidance) bool masks over the vocabulary, end tokens cleared in both; the
    end decision is compared separately."""
    g = geist_m.mask()
    bm = llnp.allocate_token_bitmask(1, v.n_vocab)
    llnp.fill_next_token_bitmask(ll_m, bm, 0)
    lb = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[: v.n_vocab].astype(bool)
    g = g.copy()
    g[v.eog] = False
    ll_end = bool(lb[v.eog].any()) if v.eog else False
    lb[v.eog] = False
    return g, lb, ll_end  # type: ignore[return-value]


def run_sequences(
    model: geist.Model,
    text: str,
    n_seq: int,
    max_steps: int,
    seed: int,
    kind: int = GBNF,
    ll_text: str | None = None,
) -> dict[str, Any]:
    """Samples n_seq sequences uniformly among geist's allowed tokens (random logits), comparing
    the allowed sets of both engines at every step. Returns counts and the first mismatch."""
    v = vocab_of(model)
    tok = ll_tokenizer(model)
    grammar = ll_grammar(ll_text if ll_text is not None else text)
    rng = np.random.default_rng(seed)
    steps = 0
    for s in range(n_seq):
        gm = Matcher(model, text, kind)
        lm = llguidance.LLMatcher(tok, grammar, log_level=0)
        if lm.is_error():
            raise AssertionError(f"llguidance rejects the grammar: {lm.get_error()}")
        for step in range(max_steps):
            g, lb, ll_end = masks(gm, lm, v)
            steps += 1
            if not np.array_equal(g, lb) or gm.can_end != ll_end:
                only_g = np.flatnonzero(g & ~lb)[:8].tolist()
                only_l = np.flatnonzero(lb & ~g)[:8].tolist()
                return {
                    "ok": False,
                    "seq": s,
                    "step": step,
                    "steps": steps,
                    "only_geist": [(i, v.pieces[i]) for i in only_g],
                    "only_llg": [(i, v.pieces[i]) for i in only_l],
                    "can_end": (gm.can_end, ll_end),
                    "n": (int(g.sum()), int(lb.sum())),
                }
            allowed = np.flatnonzero(g)
            if len(allowed) == 0 or (gm.can_end and rng.random() < 0.15):
                break
            t = int(allowed[rng.integers(len(allowed))])
            gm.accept(t)
            assert lm.consume_token(t), lm.get_error()
    return {"ok": True, "steps": steps}


__all__ = ["JSON_SCHEMA", "run_sequences", "vocab_of"]
