"""Hostile grammars and schemas: each gets a clear error (GEIST_ERR_INVALID_ARGUMENT with a message
naming the problem), never a crash, a hang or unbounded memory. The C side runs the same inputs
under ASan in native/tests/test_grammar.c."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import geist
from geist import testing
from geist.grammar import GBNF, JSON_SCHEMA, Matcher, check_grammar

_DEEP = "root ::= " + "(" * 150 + '"a"' + ")" * 150 + "\n"
_MANY_ALTS = "root ::= " + " | ".join(f'"w{i}"' for i in range(1_000_000)) + "\n"

HOSTILE: list[tuple[str, int, str | bytes, str]] = [
    # (name, kind, text, a word the message must contain)
    ("left_recursion", GBNF, 'root ::= root "a" | "b"\n', "left-recursive"),
    (
        "indirect_left_recursion",
        GBNF,
        'root ::= x\nx ::= y "a"\ny ::= root | "b"\n',
        "left-recursive",
    ),
    ("empty_repeat", GBNF, 'root ::= ("a"?)*\n', "left-recursive"),
    ("empty_language", GBNF, "root ::= x\nx ::= x2\nx2 ::= [^\\x00-\\U0010FFFF]\n", "empty"),
    ("only_self", GBNF, 'root ::= "a" root\n', "empty"),
    ("undefined_rule", GBNF, "root ::= nothing\n", "undefined rule"),
    ("no_root", GBNF, 'start ::= "a"\n', "root"),
    ("million_alternatives", GBNF, _MANY_ALTS, "over 1 MiB"),
    ("deep_nesting", GBNF, _DEEP, "nested deeper"),
    ("huge_repeat", GBNF, 'root ::= "a"{1000000}\n', "repetition count"),
    ("repeat_order", GBNF, 'root ::= "a"{5,2}\n', "n < m"),
    ("invalid_utf8", GBNF, b'root ::= "\xff\xfe"\n', "UTF-8"),
    ("schema_invalid_utf8", JSON_SCHEMA, b'{"const": "\xc3"}', "UTF-8"),
    ("unterminated_literal", GBNF, 'root ::= "abc\n', "unterminated"),
    ("bad_escape", GBNF, 'root ::= "\\q"\n', "unknown escape"),
    ("duplicate_rule", GBNF, 'root ::= "a"\nroot ::= "b"\n', "defined twice"),
    ("unbalanced_paren", GBNF, 'root ::= ("a"\n', "expected ')'"),
    (
        "schema_unknown_keyword",
        JSON_SCHEMA,
        json.dumps({"type": "string", "pattern": "^a+$"}),
        "unsupported keyword 'pattern'",
    ),
    ("schema_bad_json", JSON_SCHEMA, '{"type": "object", ', "JSON"),
    ("schema_deep", JSON_SCHEMA, '{"type":"array","items":' * 120 + "{}" + "}" * 120, "deeper"),
    (
        "schema_bad_bounds",
        JSON_SCHEMA,
        json.dumps({"type": "integer", "minimum": 5, "maximum": 1}),
        "no integer",
    ),
    (
        "schema_required_missing",
        JSON_SCHEMA,
        json.dumps({"type": "object", "properties": {}, "required": ["x"]}),
        "not in properties",
    ),
    (
        "schema_max_length",
        JSON_SCHEMA,
        json.dumps({"type": "string", "maxLength": 10**6}),
        "over 1000",
    ),
    ("schema_ref", JSON_SCHEMA, json.dumps({"$ref": "#/defs/a"}), "unsupported keyword '$ref'"),
]


@pytest.mark.parametrize("name,kind,text,word", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_is_a_clear_error(name: str, kind: int, text: str | bytes, word: str) -> None:
    t = time.perf_counter()
    with pytest.raises(geist.InvalidArgumentError) as e:
        check_grammar(text, kind)
    assert word in str(e.value), str(e.value)
    assert time.perf_counter() - t < 5.0


def test_count() -> None:
    assert len(HOSTILE) >= 20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> geist.Model:
    path = testing.build_fixture(
        Path(tmp_path_factory.mktemp("gre")) / "m.gguf", arch="llama", seed=2
    )
    return geist.Model.load(path)


def test_runtime_nesting_limit(model: geist.Model) -> None:
    """Nesting that grows at run time (parentheses) stops at the stack limit with an error,
    not unbounded memory."""
    m = Matcher(model, 'root ::= "(" root ")" | "x"\n')
    tok = {model.token_piece(i, render_special=False): i for i in range(model.n_vocab)}
    paren = tok.get(b"(")
    if paren is None:
        pytest.skip("the fixture vocabulary has no '(' token")
    with pytest.raises(geist.GeistError) as e:
        for _ in range(2000):
            m.accept(paren)
    assert "deeper than 1000" in str(e.value)


def test_rejected_token_leaves_state(model: geist.Model) -> None:
    m = Matcher(model, 'root ::= "a" "b"\n')
    before = m.mask()
    bad = next(i for i in range(model.n_vocab) if not before[i] and not model.is_end_token(i))
    with pytest.raises(geist.InvalidArgumentError):
        m.accept(bad)
    assert (m.mask() == before).all()
