"""NPC actions (geist.h "Actions"): the action list in the prompt, the reply format the grammar
holds the model to, the ACTION event and its parse, on the real SmolLM2.

The oracle for the prompt is the documented plain format (rendered here independently, then run
through the model's own chat template and tokenizer); for replies it is `jsonschema`: whenever an
NPC calls an action, the arguments validate against that action's declared schema.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import geist
from geist.actions import Action, ActionCall

jsonschema = pytest.importorskip("jsonschema")

GIVE = Action(
    "give_item",
    "Hand the player an item from your stock.",
    {"type": "object",
     "properties": {"item": {"type": "string", "enum": ["sword", "shield", "potion"]},
                    "count": {"type": "integer", "minimum": 1, "maximum": 3}},
     "required": ["item", "count"], "additionalProperties": False},
)
OPEN = Action("open_gate", "Open the village gate for the player.")
ACTIONS = [GIVE, OPEN]
PERSONA = "You are Brom, the village blacksmith. Answer in one short sentence."


def section(actions: list[Action], choice: str = "auto") -> str:
    """The documented plain format (geist.h "Actions"), written independently of the core."""
    lines = ["", "", "The game lets you act. Your actions:"]
    for a in actions:
        desc = f" {a.description}" if a.description else ""
        args = f" Arguments: {a.parameters_json()}" if a.parameters else " No arguments."
        lines.append(f"- {a.name}:{desc}{args}")
    lead = ("Reply in character in one short line, then act on a second line: "
            if choice == "required"
            else "Reply in character in one short line. To act, add a second line: ")
    lines.append(lead + '<call>{"name":"' + actions[0].name + '","arguments":{...}}')
    return "\n".join(lines)


def schema_of(name: str) -> dict[str, Any]:
    a = next(a for a in ACTIONS if a.name == name)
    return dict(a.parameters) if isinstance(a.parameters, dict) else \
        {"type": "object", "properties": {}, "additionalProperties": False}


@pytest.fixture(scope="module")
def model(smollm2_path: Any) -> geist.Model:
    return geist.Model.load(smollm2_path)


def test_action_call_from_json() -> None:
    call = ActionCall.from_json('{"name":"give_item","arguments":{"item":"sword","count":2}}')
    assert call == ActionCall("give_item", {"item": "sword", "count": 2})
    assert isinstance(call.arguments["count"], int)


@pytest.mark.slow
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_prompt_renders_the_action_list(model: geist.Model, choice: str) -> None:
    """The prompt the session ran is the model's template over the persona plus the section."""
    talk = [{"role": "system", "content": PERSONA}, {"role": "user", "content": "Hello!"}]
    s = model.session(max_seq_len=512)
    res = s.chat(talk, max_tokens=0, actions=ACTIONS, action_choice=choice).result()
    assert res.finish_reason == "length"
    want = [{"role": "system", "content": PERSONA + section(ACTIONS, choice)}, talk[1]]
    ids = model.tokenize(model.chat_template(want), parse_special=True)
    assert s.history == ids
    # no system message: one holding the section (without its blank line) comes first
    s2 = model.session(max_seq_len=512)
    s2.chat(talk[1:], max_tokens=0, actions=ACTIONS).result()
    want2 = [{"role": "system", "content": section(ACTIONS).lstrip("\n")}, talk[1]]
    assert s2.history == model.tokenize(model.chat_template(want2), parse_special=True)


@pytest.mark.slow
def test_text_prompt_gets_the_section_first(model: geist.Model) -> None:
    s = model.session(max_seq_len=512)
    s.generate("Brom says:", max_tokens=0, actions=[OPEN]).result()
    assert s.history == model.tokenize(section([OPEN]).lstrip("\n") + "\n\nBrom says:")


@pytest.mark.slow
def test_bad_actions_are_refused_at_submit(model: geist.Model) -> None:
    s = model.session(max_seq_len=256)
    talk = [{"role": "user", "content": "Hi"}]
    bad: list[tuple[list[Any], str]] = [
        ([Action("give item")], "name"),
        ([Action("9lives")], "name"),
        ([Action("x" * 65)], "name"),
        ([OPEN, OPEN], "both named"),
        ([Action("a", parameters='{"type": "string"}')], "object"),
        ([Action("a", parameters="{not json")], "JSON"),
        ([Action("a", parameters={"type": "object", "properties": {"n": {"type": "wat"}}})],
         "action 'a'"),
    ]
    for actions, word in bad:
        with pytest.raises(geist.InvalidArgumentError, match=word):
            s.chat(talk, max_tokens=4, actions=actions)
    with pytest.raises(ValueError, match="action_choice"):
        s.chat(talk, max_tokens=4, actions=[OPEN], action_choice="sometimes")
    # the session is untouched and still works
    assert s.chat(talk, max_tokens=2, temperature=0.0).result().finish_reason in ("length", "stop")


def _check_reply(res: Any, pieces: list[str]) -> None:
    assert res.text == "".join(pieces)
    assert "<call>" not in res.text  # the call line is never streamed
    if res.action is not None:
        assert res.action.name in {a.name for a in ACTIONS}
        jsonschema.validate(res.action.arguments, schema_of(res.action.name))
        json.dumps(res.action.arguments)  # plain JSON types
        assert res.action.json == json.dumps(
            {"name": res.action.name, "arguments": res.action.arguments}, separators=(",", ":"))


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_npc_with_two_actions_replies_and_calls(model: geist.Model, temperature: float) -> None:
    """An NPC with two actions: with action_choice="required" the reply always ends with a call
    whose arguments validate; with "auto" it may only speak, and any call validates too."""
    talk = [{"role": "system", "content": PERSONA},
            {"role": "user", "content": "I need a sword, please give me one."}]
    for seed in range(1):
        s = model.session(max_seq_len=512, seed=seed)
        gen = s.chat(talk, max_tokens=64, actions=ACTIONS, action_choice="required",
                     temperature=temperature)
        pieces = [p.text for p in gen]
        res = gen.result()
        assert res.finish_reason == "stop", res
        assert res.action is not None, res
        _check_reply(res, pieces)
        s2 = model.session(max_seq_len=512, seed=seed)
        gen2 = s2.chat(talk, max_tokens=48, actions=ACTIONS, temperature=temperature)
        pieces2 = [p.text for p in gen2]
        _check_reply(gen2.result(), pieces2)


@pytest.mark.slow
def test_cut_short_call_is_no_action(model: geist.Model) -> None:
    """A required call cut by max_tokens gives no ACTION (and no crash): the reply finishes with
    "grammar" and its text is still the speech."""
    talk = [{"role": "user", "content": "Open the gate!"}]
    s = model.session(max_seq_len=256)
    res = s.chat(talk, max_tokens=3, actions=ACTIONS, action_choice="required",
                 temperature=0.0).result()
    assert res.action is None
    assert res.finish_reason == "grammar"
    assert "<call>" not in res.text


@pytest.mark.slow
def test_gemma3_calls_too(gemma3_path: Any) -> None:
    """Gemma 3 (no chat template in its GGUF: the built-in ChatML one) used to write "<|im_end|>"
    as text mid-line, which ended a required reply through the stop string before its call; the
    speech holds no '<' now, so the call comes."""
    gemma = geist.Model.load(gemma3_path)
    talk = [{"role": "system", "content": PERSONA},
            {"role": "user", "content": "I need a sword, please give me one."}]
    gen = gemma.session(max_seq_len=512).chat(talk, max_tokens=64, actions=ACTIONS,
                                              action_choice="required", temperature=0.0)
    pieces = [p.text for p in gen]
    res = gen.result()
    assert res.finish_reason == "stop" and res.action is not None, res
    _check_reply(res, pieces)


@pytest.fixture(scope="module")
def fixture_model(tmp_path_factory: pytest.TempPathFactory) -> geist.Model:
    from geist import testing

    path = testing.build_fixture(tmp_path_factory.mktemp("act") / "llama.gguf", arch="llama",
                                 weight_type="Q8_0", seed=5)
    return geist.Model.load(path)


@pytest.mark.parametrize("seed", [1, 2])
def test_stop_strings_never_cut_the_call(fixture_model: geist.Model, seed: int) -> None:
    """A request's stop strings apply to the speech only: "\\n" (where the call line starts) and
    strings that occur in every call ('<call>', '{"name"') used to end a required reply before or
    inside its call, leaving no ACTION. The speech can hold neither '<' nor a newline, so none of
    these can match there: the reply must end with its call, whatever the (random) model says."""
    s = fixture_model.session(max_seq_len=256, seed=seed)
    prompt = fixture_model.tokenize("Brom says:")  # ids: no action section (a small context)
    gen = s.generate(prompt, max_tokens=200, actions=ACTIONS, action_choice="required",
                     temperature=1.0, stop=["\n", "<call>", '<call>{"name"', "<|im_end|>"])
    pieces = [p.text for p in gen]
    res = gen.result()
    assert res.finish_reason == "stop", res
    assert res.action is not None, res
    _check_reply(res, pieces)


def test_cli_run_with_actions(smollm2_path: Any, tmp_path: Any,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """`geist run --chat --actions FILE --action-choice required`: the speech, then the call
    (validated against its action's schema) on an `action:` line."""
    from geist import cli

    f = tmp_path / "actions.json"
    f.write_text(json.dumps([{"name": a.name, "description": a.description,
                              **({"parameters": a.parameters} if a.parameters else {})}
                             for a in ACTIONS]))
    assert cli.main(["run", str(smollm2_path), "I need a sword, please.", "--chat",
                     "--actions", str(f), "--action-choice", "required",
                     "--max-tokens", "48", "--max-seq-len", "512"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("action: "))
    call = ActionCall.from_json(line.removeprefix("action: "))
    jsonschema.validate(call.arguments, schema_of(call.name))
    f.write_text('{"name": "x"}')
    with pytest.raises(SystemExit, match="JSON list"):
        cli.main(["run", str(smollm2_path), "hi", "--actions", str(f)])


# ---- the chat template's tool section ---------------------------------------------------------

# A ChatML template with a tool section of the shape popular templates have (written for this
# test): the system turn lists `tools`, one `tool | tojson` a line, after the system message.
TOOLS_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] + '\\n\\n' }}
    {%- endif %}
    {{- '# Functions\\n\\nYou may call these functions (one JSON signature a line):' }}
    {{- '\\n<functions>' }}
    {%- for tool in tools %}
        {{- '\\n' + tool | tojson }}
    {%- endfor %}
    {{- '\\n</functions><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] != 'system' %}
        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""

# A second shape (also written for this test): the list once as indented JSON in the first user
# turn, names joined through map filters, each parameter walked with items() and `in required`.
TOOLS_TEMPLATE_2 = """{%- set names = tools | map(attribute='function') | map(attribute='name') %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' }}
    {%- if loop.index0 == (1 if messages[0].role == 'system' else 0) and tools is defined %}
        {{- (tools | length) ~ ' tools (' + names | join(', ') + '):\\n' }}
        {{- tools | tojson(indent=4) + '\\n' }}
        {%- for tool in tools %}
            {%- set params = tool.function.parameters %}
            {%- for name, p in params.properties.items() %}
                {{- tool.function.name + '.' + name + ': ' + p.type }}
                {{- ' (required)' if name in params.get('required', []) else '' }}
                {{- ' one of ' + p.enum | join('/') if p.enum is defined else '' }}
                {{- '\\n' }}
            {%- endfor %}
        {%- endfor %}
    {%- endif %}
    {{- message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

# The word "tools" in its text only: it never reads the variable, so it gets the plain format.
WORD_TEMPLATE = """{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n(no tools here) ' }}{%- endif %}"""


def tools_of(actions: list[Action]) -> list[dict[str, Any]]:
    """The documented `tools` value (docs/ACTIONS.md), as transformers' apply_chat_template gets
    it: {"type": "function", "function": {name, description, parameters}} per action."""
    out = []
    for a in actions:
        params = a.parameters if isinstance(a.parameters, dict) else (
            json.loads(a.parameters) if a.parameters else {"type": "object", "properties": {}})
        out.append({"type": "function", "function": {
            "name": a.name, "description": a.description or "", "parameters": params}})
    return out


def format_line(actions: list[Action], choice: str = "auto") -> str:
    """The plain section's last line alone: what the system message gets on the tools path."""
    return "\n\n" + section(actions, choice).rsplit("\n", 1)[1]


def render(template: str, messages: list[dict[str, str]], tools: Any = None) -> str:
    """jinja2 with transformers' tojson, as Hugging Face renders a chat template."""
    import jinja2

    from geist import testing

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = testing.transformers_tojson
    ctx: dict[str, Any] = {"messages": messages, "add_generation_prompt": True}
    if tools is not None:
        ctx["tools"] = tools
    return env.from_string(template).render(**ctx)


def _template_model(tmp_path_factory: pytest.TempPathFactory, template: str,
                    n_ctx: int = 1024) -> geist.Model:
    from geist import testing

    path = testing.build_fixture(tmp_path_factory.mktemp("tools") / "llama.gguf", arch="llama",
                                 weight_type="Q8_0", seed=5, n_ctx=n_ctx, chat_template=template)
    return geist.Model.load(path)


@pytest.fixture(scope="module")
def tools_model(tmp_path_factory: pytest.TempPathFactory) -> geist.Model:
    return _template_model(tmp_path_factory, TOOLS_TEMPLATE)


@pytest.fixture(scope="module")
def tools_model_2(tmp_path_factory: pytest.TempPathFactory) -> geist.Model:
    return _template_model(tmp_path_factory, TOOLS_TEMPLATE_2, 2048)  # the indented list


@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("which", [1, 2])
def test_tools_template_renders_the_actions(tools_model: geist.Model, tools_model_2: geist.Model,
                                            which: int, choice: str) -> None:
    """A template that reads `tools` gets the actions through it (transformers' tool list); the
    system message gets only the reply-format line (the reply is the engine's format)."""
    model, template = (tools_model, TOOLS_TEMPLATE) if which == 1 else (tools_model_2,
                                                                         TOOLS_TEMPLATE_2)
    talk = [{"role": "system", "content": PERSONA}, {"role": "user", "content": "Hello!"}]
    s = model.session(max_seq_len=1024 * which)
    s.chat(talk, max_tokens=0, actions=ACTIONS, action_choice=choice).result()
    want = [{"role": "system", "content": PERSONA + format_line(ACTIONS, choice)}, talk[1]]
    text = render(template, want, tools_of(ACTIONS))
    seen = ('{"type": "function", "function": {"name": "give_item", "description": ' if which == 1
            else "give_item.item: string (required) one of sword/shield/potion")
    assert seen in text
    assert s.history == model.tokenize(text, parse_special=True)
    # no system message: one holding the format line (without its blank line) comes first
    s2 = model.session(max_seq_len=1024 * which)
    s2.chat(talk[1:], max_tokens=0, actions=[OPEN], action_choice=choice).result()
    want2 = [{"role": "system", "content": format_line([OPEN], choice).lstrip("\n")}, talk[1]]
    text2 = render(template, want2, tools_of([OPEN]))
    assert s2.history == model.tokenize(text2, parse_special=True)


def test_tools_template_reply_keeps_the_engine_format(tools_model: geist.Model) -> None:
    """The template's tool section changes the prompt only: the reply is still held to the
    engine's action format (speech, then the <call> line), whatever the (random) model says.
    Seeds 2 and 4 end with a call; at 1 and 3 the call begun at its reserve is cut by max_tokens
    (finish "grammar", no call: the reserve is sized for real vocabularies at about 2.8 bytes a
    token, and this fixture's tokens are mostly single bytes), and the speech still holds."""
    talk = [{"role": "system", "content": PERSONA}, {"role": "user", "content": "A sword!"}]
    for seed in (1, 2, 3, 4):
        gen = tools_model.session(max_seq_len=1024, seed=seed).chat(
            talk, max_tokens=200, actions=ACTIONS, action_choice="required", temperature=1.0)
        pieces = [p.text for p in gen]
        res = gen.result()
        if seed in (2, 4):
            assert res.finish_reason == "stop" and res.action is not None, res
        else:
            assert res.finish_reason == "grammar" and res.action is None, res
        _check_reply(res, pieces)
        assert "\n" not in res.text


def test_text_prompt_on_a_tools_template_gets_the_plain_section(tools_model: geist.Model) -> None:
    """A text prompt is not rendered through the template: the plain section comes first."""
    s = tools_model.session(max_seq_len=1024)
    s.generate("Brom says:", max_tokens=0, actions=[OPEN]).result()
    assert s.history == tools_model.tokenize(section([OPEN]).lstrip("\n") + "\n\nBrom says:")


def test_fractional_number_in_a_schema_gets_the_plain_section(tools_model: geist.Model) -> None:
    """The template engine has integers only: an action whose schema holds 0.5 cannot be passed as
    `tools`, so the prompt is the plain section (and the template renders without tools)."""
    tip = Action("tip", "Tip the player.", {"type": "object", "properties": {
        "gold": {"type": "number", "enum": [0.5, 1.5]}}, "required": ["gold"]})
    talk = [{"role": "system", "content": PERSONA}, {"role": "user", "content": "Hello!"}]
    s = tools_model.session(max_seq_len=1024)
    s.chat(talk, max_tokens=0, actions=[tip]).result()
    want = [{"role": "system", "content": PERSONA + section([tip])}, talk[1]]
    assert s.history == tools_model.tokenize(render(TOOLS_TEMPLATE, want), parse_special=True)


def test_template_naming_tools_only_in_text_gets_the_plain_section(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    m = _template_model(tmp_path_factory, WORD_TEMPLATE)
    talk = [{"role": "system", "content": PERSONA}, {"role": "user", "content": "Hello!"}]
    s = m.session(max_seq_len=1024)
    s.chat(talk, max_tokens=0, actions=ACTIONS).result()
    want = [{"role": "system", "content": PERSONA + section(ACTIONS)}, talk[1]]
    assert s.history == m.tokenize(render(WORD_TEMPLATE, want), parse_special=True)
