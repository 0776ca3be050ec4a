"""geist's allowed-token sets equal llguidance's, step by step, on seeded random sequences.

The quick test runs the suite on the fixture models' vocabularies (byte-level BPE and
SentencePiece with byte fallback); the slow one on both real models (SmolLM2 49k, Gemma 3 262k),
a few sequences per grammar. The full 200 sequences per grammar per model:
`tests/bench/grammar_oracle_full.py`. Sequences draw uniformly among geist's allowed tokens (random
logits: no model forward is needed for a mask).

JSON schemas are compared through the GBNF geist compiles them to (geist_json_schema_to_gbnf):
llguidance's own JSON compiler has its own output conventions (separators, whitespace, number
spellings) that were not aligned with geist's compact JSON, so its language is not the same; the
schema compiler itself is checked by validating generated output with `jsonschema`
(test_generate.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import geist
from geist import testing
from geist.grammar import JSON_SCHEMA, json_schema_to_gbnf

pytest.importorskip("llguidance")

import oracle
from suite import CHAIN_CASES, SUITE


def _check(model: geist.Model, n_seq: int, max_steps: int,
           cases: list[tuple[str, int, str]] = SUITE) -> None:
    bad = []
    for i, (name, kind, text) in enumerate(cases):
        ll = json_schema_to_gbnf(text) if kind == JSON_SCHEMA else None
        r = oracle.run_sequences(
            model, text, n_seq, max_steps, seed=1000 + i, kind=kind, ll_text=ll
        )
        if not r["ok"]:
            bad.append((name, r))
    assert not bad, bad


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def fixture_model(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> geist.Model:
    path = testing.build_fixture(
        Path(tmp_path_factory.mktemp("gr")) / f"{request.param}.gguf",
        arch=request.param,
        weight_type="Q8_0",
        seed=5,
    )
    return geist.Model.load(path)


def test_suite_size() -> None:
    assert len(SUITE) >= 20


def test_oracle_fixture_vocab(fixture_model: geist.Model) -> None:
    _check(fixture_model, n_seq=4, max_steps=30)


def test_oracle_counted_repetitions(fixture_model: geist.Model) -> None:
    _check(fixture_model, n_seq=6, max_steps=30, cases=CHAIN_CASES)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_oracle_real_models(which: str) -> None:
    from geist import models

    path = models.smollm2_path() if which == "smollm2" else models.gemma3_path()
    m = geist.Model.load(path)
    _check(m, n_seq=3, max_steps=40)
    _check(m, n_seq=4, max_steps=30, cases=CHAIN_CASES)
