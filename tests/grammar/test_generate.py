"""Generation under a grammar through the runtime: output parses and validates (jsonschema), the
finish reasons, errors at submit. Quick tests on a fixture model (random weights: the grammar
alone makes the output valid); the slow ones on both real models, greedy and temperature 1.0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import geist
from geist import testing

jsonschema = pytest.importorskip("jsonschema")

from suite import ACTION_SCHEMA  # noqa: E402

SMALL = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> geist.Model:
    path = testing.build_fixture(
        Path(tmp_path_factory.mktemp("grg")) / f"{request.param}.gguf",
        arch=request.param,
        weight_type="Q8_0",
        seed=11,
    )
    return geist.Model.load(path)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fixture_json_schema_output_validates(model: geist.Model, temperature: float) -> None:
    s = model.session(max_seq_len=256, seed=4)
    r = s.generate("Answer:", max_tokens=64, json_schema=SMALL, temperature=temperature).result()
    assert r.finish_reason == "stop", r
    jsonschema.validate(r.json(), SMALL)
    assert r.text == json.dumps(r.json(), separators=(",", ":"))


def test_fixture_gbnf_output(model: geist.Model) -> None:
    s = model.session(max_seq_len=256, seed=2)
    g = 'root ::= ("yes" | "no") " " [0-9]{1,3}\n'
    r = s.generate("Q:", max_tokens=32, grammar=g, temperature=1.0).result()
    assert r.finish_reason == "stop"
    word, num = r.text.split(" ")
    assert word in ("yes", "no") and num.isdigit() and 1 <= len(num) <= 3


def test_fixture_too_few_tokens_finishes_grammar(model: geist.Model) -> None:
    s = model.session(max_seq_len=256, seed=1)
    r = s.generate("Q:", max_tokens=3, json_schema=ACTION_SCHEMA, temperature=1.0).result()
    assert r.finish_reason == "grammar", r
    with pytest.raises(ValueError):
        r.json()


def test_fixture_bad_grammar_fails_at_submit(model: geist.Model) -> None:
    s = model.session(max_seq_len=64)
    with pytest.raises(geist.InvalidArgumentError, match="undefined rule"):
        s.generate("x", grammar="root ::= nope\n")
    with pytest.raises(geist.InvalidArgumentError, match="unsupported keyword"):
        s.generate("x", json_schema={"type": "string", "format": "date"})
    with pytest.raises(geist.InvalidArgumentError, match="not both"):
        s.generate("x", grammar='root ::= "a"\n', json_schema={})
    # the session is still usable
    assert s.generate("x", max_tokens=2, grammar='root ::= "ab"\n').result().finish_reason == "stop"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_real_models_json_schema(which: str, temperature: float) -> None:
    from geist import models

    m = geist.Model.load(models.smollm2_path() if which == "smollm2" else models.gemma3_path())
    s = m.session(max_seq_len=512, seed=7)
    talk = [
        {"role": "system", "content": "You are Brom the blacksmith. Reply as JSON."},
        {"role": "user", "content": "Can you give me a sword?"},
    ]
    for schema in (ACTION_SCHEMA, SMALL):
        s.reset()
        r = s.chat(talk, max_tokens=120, json_schema=schema, temperature=temperature).result()
        assert r.finish_reason == "stop", r
        jsonschema.validate(r.json(), schema)


def test_fixture_template_end_strings_are_content_under_a_grammar(model: geist.Model) -> None:
    """A chat reply under a grammar ends where the grammar lets it (end-of-turn tokens), not at
    the template's end strings written as text: "<|im_end|>" inside the grammar's language used
    to cut the reply short of its grammar while it finished "stop" (Gemma 3 under the built-in
    ChatML template wrote it inside a JSON string). The request's own stop strings still apply."""
    marker = next(x for x in model.chat_stop_strings() if x.startswith("<"))
    g = 'root ::= "x' + marker.replace('"', '\\"') + 'y"\n'
    talk = [{"role": "user", "content": "hi"}]
    s = model.session(max_seq_len=256, seed=3)
    r = s.chat(talk, max_tokens=48, grammar=g, temperature=1.0).result()
    assert (r.text, r.finish_reason) == ("x" + marker + "y", "stop"), r
    s.reset()
    r2 = s.chat(talk, max_tokens=48, grammar=g, temperature=1.0, stop=["y"]).result()
    assert (r2.text, r2.finish_reason) == ("x" + marker, "stop"), r2
