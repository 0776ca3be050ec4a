"""Chat templates: the native Jinja subset against Python jinja2 on real and real-style templates.

The reference is `jinja2.Environment(trim_blocks=True, lstrip_blocks=True)` with transformers'
own `tojson` filter (as Hugging Face transformers renders chat templates: `json.dumps` with
ensure_ascii, indent, separators and sort_keys as arguments, instead of jinja2's HTML-safe one
that sorts keys) and the same context the core provides: messages, add_generation_prompt,
bos_token and eos_token (the texts of the model's BOS/EOS tokens, read here independently with
gguf.GGUFReader) and a raise_exception() global.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import gguf
import jinja2
import pytest

import geist
from geist import chat, testing
from geist._binding import ffi, lib

Message = dict[str, str]

# ---- real-style templates of the four families (written the way the published ones look) ----

CHATML = """{%- for message in messages %}
    {%- if loop.first and message['role'] != 'system' %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Llama 3 Instruct: one line, bos folded into the first turn, contents trimmed.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# Llama 3.1 style: system message pulled out, date lines, `is defined` checks, slicing.
LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'
        + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Gemma 3 style: the system message becomes a prefix of the first user turn; roles must
# alternate; the assistant is called "model".
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

# Mistral Instruct v0.3 style: selectattr, loop.last, the system message joins the last user turn.
MISTRAL = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{%- for message in loop_messages %}
    {%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}
        {{- raise_exception("After the optional system message, conversation roles must "
                            "alternate user/assistant/user/assistant/...") }}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"] + eos_token}}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception "
                            "of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# Llama 2 / Mistral v0.1 style (one line, <<SYS>> folded into the first user turn).
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and "
    "system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}"
    "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}"
)

SYNTHETIC = {
    "chatml": CHATML,
    "llama3": LLAMA3,
    "llama31": LLAMA31,
    "gemma": GEMMA,
    "mistral": MISTRAL,
    "llama2": LLAMA2,
}

SYSTEM = {"role": "system", "content": "You are Brom, a gruff blacksmith.\n  Keep it short.  "}
TURNS: list[Message] = [
    {"role": "user", "content": "  Hello there! Got any swords?\n"},
    {"role": "assistant", "content": "Aye. Steel's 40 gold, \"fine\" steel's 90."},
    {"role": "user", "content": "Ünïcödé ✓ and {{ not a tag }} {% neither %} 'quotes'"},
    {"role": "assistant", "content": "Hmph.\n\nLine two."},
    {"role": "user", "content": "Bye"},
]

CONVERSATIONS: dict[str, list[Message]] = {
    "1_user": TURNS[:1],
    "1_system": [SYSTEM],
    "2_user_assistant": TURNS[:2],
    "2_system_user": [SYSTEM, TURNS[0]],
    "5_no_system": TURNS[:5],
    "5_system": [SYSTEM, *TURNS[:4]],
    "3_bad_order": [TURNS[0], TURNS[0], TURNS[1]],
}


# ---- reference ----------------------------------------------------------------------------


class TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def jinja_env() -> jinja2.Environment:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    env.filters["tojson"] = testing.transformers_tojson
    return env


def jinja_render(
    template: str, messages: list[Message], add_generation_prompt: bool, bos: str, eos: str
) -> tuple[str, str]:
    """("ok", text) or ("raise", message) as Python jinja2 renders it."""
    env = jinja_env()
    try:
        text = env.from_string(template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
        )
    except TemplateRaised as e:
        return ("raise", str(e))
    return ("ok", text)


def geist_render(
    model: geist.Model, template: str | None, messages: list[Message], add_generation_prompt: bool
) -> tuple[str, str]:
    try:
        return ("ok", chat.apply_template(model, messages, add_generation_prompt, template))
    except geist.InvalidArgumentError as e:
        return ("raise", str(e))


# ---- fixtures -----------------------------------------------------------------------------


class GgufFacts:
    def __init__(self, path: Path) -> None:
        reader = gguf.GGUFReader(str(path))
        fields = reader.fields
        tmpl = fields.get("tokenizer.chat_template")
        self.chat_template: str | None = None if tmpl is None else str(tmpl.contents())
        tokens = fields["tokenizer.ggml.tokens"]
        self.bos = str(tokens.contents(int(fields["tokenizer.ggml.bos_token_id"].contents())))
        self.eos = str(tokens.contents(int(fields["tokenizer.ggml.eos_token_id"].contents())))


@pytest.fixture(scope="module")
def smol(smollm2_path: Path) -> Iterator[tuple[geist.Model, GgufFacts]]:
    model = geist.Model.load(smollm2_path)
    yield model, GgufFacts(smollm2_path)
    model.close()


# ---- real and real-style templates --------------------------------------------------------


@pytest.mark.parametrize("agp", [True, False])
@pytest.mark.parametrize("conv", sorted(CONVERSATIONS))
def test_smollm2_own_template(smol: tuple[geist.Model, GgufFacts], conv: str, agp: bool) -> None:
    model, facts = smol
    assert facts.chat_template is not None and "<|im_start|>" in facts.chat_template
    msgs = CONVERSATIONS[conv]
    want = jinja_render(facts.chat_template, msgs, agp, facts.bos, facts.eos)
    assert geist_render(model, None, msgs, agp) == want  # NULL: the model's own template
    assert geist_render(model, facts.chat_template, msgs, agp) == want


@pytest.mark.parametrize("agp", [True, False])
@pytest.mark.parametrize("conv", sorted(CONVERSATIONS))
@pytest.mark.parametrize("family", sorted(SYNTHETIC))
def test_family_templates_match_jinja2(
    smol: tuple[geist.Model, GgufFacts], family: str, conv: str, agp: bool
) -> None:
    model, facts = smol
    template = SYNTHETIC[family]
    msgs = CONVERSATIONS[conv]
    want = jinja_render(template, msgs, agp, facts.bos, facts.eos)
    got = geist_render(model, template, msgs, agp)
    assert got == want
    if want[0] == "ok" and conv != "1_system":  # a lone system turn may render to nothing
        assert want[1], "the reference rendered nothing: the case tests nothing"


def test_family_outputs_have_the_expected_shape(smol: tuple[geist.Model, GgufFacts]) -> None:
    """Spot checks written out by hand, so a bug shared with the reference would still show."""
    model, facts = smol
    conv = [SYSTEM, TURNS[0]]
    gemma = chat.apply_template(model, conv, True, GEMMA)
    assert gemma == (
        f"{facts.bos}<start_of_turn>user\n{SYSTEM['content']}\n\n"
        "Hello there! Got any swords?<end_of_turn>\n<start_of_turn>model\n"
    )
    llama3 = chat.apply_template(model, TURNS[:1], True, LLAMA3)
    assert llama3 == (
        f"{facts.bos}<|start_header_id|>user<|end_header_id|>\n\nHello there! Got any swords?"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    mistral = chat.apply_template(model, [SYSTEM, *TURNS[:3]], False, MISTRAL)
    assert mistral.startswith(facts.bos + "[INST] " + TURNS[0]["content"] + "[/INST] ")
    assert f"[INST] {SYSTEM['content']}\n\n{TURNS[2]['content']}[/INST]" in mistral
    chatml = chat.apply_template(model, TURNS[:1], False, CHATML)
    assert chatml.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")


def test_raise_exception_message_comes_through(smol: tuple[geist.Model, GgufFacts]) -> None:
    model, _ = smol
    with pytest.raises(geist.InvalidArgumentError) as ei:
        chat.apply_template(model, CONVERSATIONS["3_bad_order"], True, GEMMA)
    assert str(ei.value) == "Conversation roles must alternate user/assistant/user/assistant/..."
    assert ei.value.status == lib.GEIST_ERR_INVALID_ARGUMENT
    with pytest.raises(geist.InvalidArgumentError, match=r"^NPC says no: 42$"):
        chat.apply_template(model, TURNS[:1], True, "{{ raise_exception('NPC says no: ' ~ 42) }}")


# ---- language features, each against jinja2 ----------------------------------------------

FEATURES = [
    "{{ 'a' }}b{{ \"c\\n\\t\\\\d\" }}{{ '\\x41\\u00e9' }}{{ \"it's\" }}{{ 'say \"hi\"' }}",
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.length }}{{ loop.revindex }}:{{ m.role }}={{ m['content'] }};{% endfor %}",
    "{% if add_generation_prompt %}Y{% elif false %}N{% else %}E{% endif %}",
    "  {%- if true -%}  x  {%- endif -%}  \n",
    "a  {{- 'b' -}}  c {# comment #} d {#- c -#} e",
    "a\n  {% if true %}\n    x\n  {% endif %}\nb\n",
    "{% for m in messages %}\n  {{- m.role }}\n{% endfor %}",
    "x\r\ny\rz\n",
    "{{ messages[0].content|trim }}|{{ messages[1:]|length }}|{{ messages[-1].role }}"
    "|{{ messages[:1][0].role }}|{{ messages[5] }}|{{ messages[0].missing }}|",
    "{{ 'abc'[1:] }}{{ 'abcdef'[::2] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ 'héllo'[::-1] }}",
    "{% set a = [1,2,3] %}{{ a[1:] }}{{ a[:-1] }}{{ a[::-1] }}{{ a[5:] }}{{ a[-10:1] }}",
    "{{ 1 + 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 2 ** 5 }} {{ 3 - 5 }}",
    "{% for m in messages %}{{ 'E' if loop.index0 % 2 == 0 else 'O' }}{% endfor %}",
    "{{ 'a' ~ 1 ~ none ~ true }}{{ (1 + 2) ~ 3 }}{{ 'a' + 'b' | upper }}",
    "{{ 1 == 1 }}{{ 'a' != 'b' }}{{ 1 < 2 }}{{ 'b' > 'a' }}{{ 2 <= 2 }}{{ 3 >= 4 }}{{ 1 < 2 < 3 }}"
    "{{ 'abc' < 'abd' }}{{ 1 == true }}{{ '1' == 1 }}{{ [1, 2] == [1, 2] }}",
    "{{ true and false }}{{ true or false }}{{ not true }}{{ 'x' and 'y' }}{{ '' or 'z' }}"
    "{{ not messages[0].role == 'user' }}{{ false or not false and true }}",
    "{{ 'ell' in 'hello' }}{{ 'x' not in 'hello' }}{{ 1 in [1,2] }}{{ 'role' in messages[0] }}"
    "{{ not 'a' in 'abc' }}",
    "{{ foo is defined }}{{ foo is not defined }}{{ messages is defined }}{{ none is none }}"
    "{{ 'a' is string }}{{ 1 is string }}{{ 10 is divisibleby 5 }}{{ 3 is odd }}{{ 4 is even }}"
    "{{ messages[0].content is not none }}{{ {} is mapping }}{{ [1] is iterable }}",
    "{{ 'a' if true else 'b' }}{{ 'c' if false else 'd' }}{{ 'e' if false }}|",
    "{{ ' x y '|trim }}|{{ '\\u3000 a \\u00a0'|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'AbC'|upper }}"
    "{{ 'AbC'|lower }}|{{ 'hello'|capitalize }}|{{ 'hello world'.title() }}",
    "{{ '  x  '.strip() }}|{{ 'abcba'.strip('ab') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|"
    "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}",
    "{% set x = 5 %}{{ x }}{% set x = x + 1 %}{{ x }}{% set s %}in {{ 1 }}{% endset %}[{{ s }}]",
    "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}"
    "{{ ns.found }}{{ ns.n }}",
    "{% set x = 'out' %}{% for m in messages %}{{ x }}{% set x = m.role %}{{ x }}{% endfor %}"
    "{{ x }}",
    "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}"
    "{{ loop.index }}{% endfor %}",
    "{{ [1, 'a', none, true] }}{{ {'a': 1, 'b': 'c'} }}{{ messages[0] }}{{ (1, 2) }}{{ (1,) }}",
    "{{ messages|map(attribute='role')|join(', ') }}|"
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|"
    "{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}|"
    "{{ [1, 2, 3, 4]|select('even')|list }}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{% else %}none"
    "{% endfor %}{% for m in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"
    "{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 7) }}",
    "{{ 'a,b,,c'.split(',') }}{{ '  a  b '.split() }}{{ 'aXbXc'.replace('X', '-') }}"
    "{{ 'abc'|replace('b', 'B') }}{{ ', '.join(['a', 'b']) }}",
    "{{ x|default('dflt') }}{{ ''|default('e', true) }}{{ [3, 4]|first }}{{ [3, 4]|last }}"
    "{{ '12'|int + 1 }}{{ 'x'|int }}{{ 5|string ~ 'a' }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(5, 0, -2)|list }}",
    "{% for m in messages %}{{ loop.cycle('odd', 'even') }}{{ loop.previtem.role if "
    "loop.previtem is defined else '-' }}{% endfor %}",
    "{{ {'b': 1, 'a': [1, '<x>', none]}|tojson }}{{ 'é'|tojson }}{{ messages[1]|tojson }}",
    # tojson's arguments (transformers' filter): indentation by count and by string, nested and
    # empty containers, sorted keys, ASCII escapes (control characters always), separators
    "{{ {'b': 1, 'a': [1, '<x>', none, {}, []], 'c': {'d': true}}|tojson(indent=2) }}"
    "{{ [[], [1, [2]]]|tojson(indent='\t') }}{{ [1, {'k': 2}]|tojson(indent=0) }}"
    "{{ messages[1]|tojson(sort_keys=true) }}{{ {'z': 1, 'a': 2}|tojson(false, none, none, true) }}"
    "{{ 'é\x01\x7f\n'|tojson(ensure_ascii=true) }}{{ 'é\x01\x7f'|tojson }}"
    "{{ [1, {'a': 2}]|tojson(separators=(',', ':')) }}"
    "{{ [1, 2]|tojson(indent=1, separators=('; ', '= ')) }}",
    "{% raw %}{{ not rendered }}{% endraw %}",
    "{{ \"a\" \"b\" 'c' }}{{ '%' }}{{ '{%' }}{{ '}}' }}{{ {'a': '}}'}['a'] }}",
    "{{ 9223372036854775807 }}{{ 2 * 3 ~ 4 }}{{ (1 + 2) * 3 }}{{ -1 + 2 }}",
    "line1\nline2\n",
]


@pytest.mark.parametrize("index", range(len(FEATURES)))
def test_language_features_match_jinja2(smol: tuple[geist.Model, GgufFacts], index: int) -> None:
    model, facts = smol
    msgs = [SYSTEM, *TURNS[:2]]
    for agp in (True, False):
        want = jinja_render(FEATURES[index], msgs, agp, facts.bos, facts.eos)
        assert geist_render(model, FEATURES[index], msgs, agp) == want


# ---- errors -------------------------------------------------------------------------------

SYNTAX_ERRORS = [
    ("{% if %}x{% endif %}", 6),
    ("{{ 1 + }}", 7),
    ("ab{% for x in y %}", 2),
    ("{% endfor %}", 3),
    ("{{ 'unterminated }}", 3),
    ("{% foo %}", 3),
    ("{{ messages[0] ", 0),
    ("{# open comment", 0),
    ("{{ a ) }}", 5),
]


@pytest.mark.parametrize(("template", "pos"), SYNTAX_ERRORS)
def test_syntax_errors_name_the_byte(
    smol: tuple[geist.Model, GgufFacts], template: str, pos: int
) -> None:
    model, facts = smol
    with pytest.raises(jinja2.TemplateSyntaxError):
        jinja_render(template, TURNS[:1], True, facts.bos, facts.eos)
    with pytest.raises(geist.BadFormatError, match=rf"syntax error at byte {pos}:") as ei:
        chat.apply_template(model, TURNS[:1], True, template)
    assert ei.value.status == lib.GEIST_ERR_BAD_FORMAT


@pytest.mark.parametrize(
    "template",
    ["{{ undefined_thing.attr }}", "{{ 'a' + 1 }}", "{{ 1 // 0 }}", "{{ messages[0].x.y }}"],
)
def test_runtime_errors(smol: tuple[geist.Model, GgufFacts], template: str) -> None:
    model, facts = smol
    with pytest.raises(Exception):  # noqa: B017 - jinja2 raises several types here
        jinja_render(template, TURNS[:1], True, facts.bos, facts.eos)
    with pytest.raises(geist.BadFormatError, match=r"chat template error at byte \d+"):
        chat.apply_template(model, TURNS[:1], True, template)


HOSTILE = [
    "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",  # nesting
    "{{ " + " + ".join(["1"] * 5000) + " }}",  # a very tall expression tree
    "{% if true %}" * 2000 + "x" + "{% endif %}" * 2000,  # nested blocks
    "{{ " + "[" * 3000 + "]" * 3000 + " }}",
    "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
    "{% endfor %}{% endfor %}{% endfor %}",  # 10^9 iterations
    "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",  # 100 MB of output
    "{% set ns = namespace(s='x') %}{% for i in range(200) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s|length }}",  # 2^200 bytes
    "{% set ns = namespace(l=[]) %}{% for i in range(20000) %}{% set ns.l = [ns.l] %}"
    "{% endfor %}{{ ns.l }}",  # a value nested 20000 deep, then printed
    "{{ range(10 ** 12)|length }}",
    "{{ 'ab' * 10 ** 12 }}",
    "{{ 2 ** 100 }}",
]


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_templates_fail_cleanly(smol: tuple[geist.Model, GgufFacts], index: int) -> None:
    model, _ = smol
    start = time.perf_counter()
    with pytest.raises(geist.BadFormatError, match=r"limit|too deep|nested|overflow"):
        chat.apply_template(model, TURNS[:1], True, HOSTILE[index])
    assert time.perf_counter() - start < 10.0
    # the model is unharmed
    assert chat.apply_template(model, TURNS[:1], True, "{{ messages[0].role }}") == "user"


def test_error_is_recorded_on_the_model(smol: tuple[geist.Model, GgufFacts]) -> None:
    model, _ = smol
    with pytest.raises(geist.BadFormatError):
        chat.apply_template(model, TURNS[:1], True, "{% if %}")
    buf = ffi.new("char[]", 512)
    lib.geist_model_error(model._ptr, buf, 512)
    assert b"syntax error at byte 6" in ffi.string(buf)


# ---- the C buffer contract ----------------------------------------------------------------


def _raw_call(model: geist.Model, template: str, cap: int) -> tuple[int, int, bytes]:
    role, content = ffi.new("char[]", b"user"), ffi.new("char[]", b"Hi")
    msgs = ffi.new("geist_chat_message[]", 1)
    msgs[0].role, msgs[0].content = role, content
    tmpl = ffi.new("char[]", template.encode())
    needed = ffi.new("size_t *")
    buf = ffi.new("char[]", max(cap, 1)) if cap else ffi.NULL
    status = lib.geist_chat_apply_template(model._ptr, tmpl, msgs, 1, 1, buf, cap, needed)
    text = ffi.string(buf) if cap else b""
    return int(status), int(needed[0]), text


def test_buffer_rules(smol: tuple[geist.Model, GgufFacts]) -> None:
    model, _ = smol
    template = "<{{ messages[0].content }}|{{ add_generation_prompt }}>"
    full = b"<Hi|True>"
    status, needed, _ = _raw_call(model, template, 0)
    assert status == lib.GEIST_ERR_BUFFER_TOO_SMALL and needed == len(full) + 1
    status, needed, text = _raw_call(model, template, len(full))
    assert status == lib.GEIST_ERR_BUFFER_TOO_SMALL and needed == len(full) + 1
    assert text == full[:-1]  # truncated, NUL-terminated
    status, needed, text = _raw_call(model, template, len(full) + 1)
    assert status == 0 and needed == len(full) + 1 and text == full


def test_null_arguments_are_rejected(smol: tuple[geist.Model, GgufFacts]) -> None:
    model, _ = smol
    needed = ffi.new("size_t *")
    buf = ffi.new("char[]", 64)
    assert (
        lib.geist_chat_apply_template(ffi.NULL, ffi.NULL, ffi.NULL, 0, 1, buf, 64, needed)
        == lib.GEIST_ERR_INVALID_ARGUMENT
    )
    assert (
        lib.geist_chat_apply_template(model._ptr, ffi.NULL, ffi.NULL, 2, 1, buf, 64, needed)
        == lib.GEIST_ERR_INVALID_ARGUMENT
    )
    msgs = ffi.new("geist_chat_message[]", 1)  # NULL role and content
    assert (
        lib.geist_chat_apply_template(model._ptr, ffi.NULL, msgs, 1, 1, buf, 64, needed)
        == lib.GEIST_ERR_INVALID_ARGUMENT
    )
    with pytest.raises(ValueError):
        chat.apply_template(model, [{"role": "user", "content": "a\0b"}])


def test_large_conversation(smol: tuple[geist.Model, GgufFacts]) -> None:
    model, facts = smol
    msgs = [TURNS[i % 2] for i in range(400)]
    want = jinja_render(LLAMA31, msgs, True, facts.bos, facts.eos)
    assert geist_render(model, LLAMA31, msgs, True) == want
    assert len(want[1]) > 10000


def test_model_without_template_gets_chatml(gemma3_path: Path) -> None:
    """Gemma 3 270M (base) has no tokenizer.chat_template: NULL renders the built-in ChatML.
    (GGUFReader takes half a minute on its 262k vocabulary, so its facts are written here:
    BOS id 2 is "<bos>", EOS id 1 is "<eos>".)"""
    model = geist.Model.load(gemma3_path)
    try:
        needed = ffi.new("size_t *")
        status = lib.geist_model_meta(model._ptr, b"tokenizer.chat_template", ffi.NULL, 0, needed)
        assert status == lib.GEIST_ERR_INVALID_ARGUMENT  # absent
        msgs = [SYSTEM, *TURNS[:3]]
        chatml = (
            "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
            "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
            "{{ '<|im_start|>assistant\\n' }}{% endif %}"
        )
        for agp in (True, False):
            want = jinja_render(chatml, msgs, agp, "<bos>", "<eos>")
            assert geist_render(model, None, msgs, agp) == want
        bos = chat.apply_template(model, [], False, "{{ bos_token }}|{{ eos_token }}")
        assert bos == "<bos>|<eos>"
    finally:
        model.close()
