"""Writes the committed seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Run it again only to change the seeds: `PYTHONPATH=python .venv/bin/python tests/fuzz/make_seeds.py`
(needs the real models for the chat templates). Small files on purpose: libFuzzer mutates them."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def put(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def gguf_seeds() -> None:
    from geist.testing import build_fixture

    tiny = dict(n_vocab=300, d_model=32, n_head=2, n_head_kv=1, head_dim=16, d_ff=32, n_ctx=64)
    out = CORPUS / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    build_fixture(out / "llama_q8.gguf", "llama", "Q8_0", seed=1, n_layer=1, **tiny)
    build_fixture(out / "llama_f16.gguf", "llama", "F16", seed=2, n_layer=1, **tiny)
    # six layers: five sliding-window layers and one global one (the snapshot target's model)
    build_fixture(out / "gemma3_q8.gguf", "gemma3", "Q8_0", seed=3, n_layer=6, sliding_window=4,
                  **tiny)
    new_arch_seeds(tiny)


def new_arch_seeds(tiny: dict[str, int]) -> None:
    """The later architectures' recipes: biases (qwen2), QK norms (qwen3), fused tensors and
    partial rotary (phi3), soft-caps (gemma2), rope_freqs (llama3)."""
    from geist.testing import build_fixture

    out = CORPUS / "gguf"
    build_fixture(out / "qwen2_q8.gguf", "qwen2", "Q8_0", seed=4, n_layer=1, **tiny)
    build_fixture(out / "qwen3_q8.gguf", "qwen3", "Q8_0", seed=5, n_layer=1, **tiny)
    build_fixture(out / "phi3_q8.gguf", "phi3", "Q8_0", seed=6, n_layer=1, **(tiny | {"n_rot": 8}))
    build_fixture(out / "gemma2_q8.gguf", "gemma2", "Q8_0", seed=7, n_layer=2, sliding_window=4,
                  **tiny)
    build_fixture(out / "llama3_q8.gguf", "llama", "Q8_0", seed=8, n_layer=1, rope_freqs=True,
                  tied=True, tokenizer="bpe:llama-bpe", **tiny)


POPULAR_TEMPLATES = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}",
    "phi3": "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == "
    "'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}"
    "{{ eos_token }}{% endif %}",
    "zephyr": "{% for message in messages %}\\n{% if message['role'] == 'user' %}\\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\\n{% elif message['role'] == "
    "'system' %}\\n{{ '<|system|>\\n' + message['content'] + eos_token }}\\n"
    "{%- elif message['role'] == 'assistant' -%}\\n{{ '<|assistant|>\\n'  + message['content'] + "
    "eos_token }}\\n{% endif %}\\n{% if loop.last and add_generation_prompt %}\\n"
    "{{ '<|assistant|>' }}\\n{% endif %}\\n{% endfor %}",
    "filters": "{%- set ns = namespace(n=0) -%}{%- for m in messages | selectattr('role', "
    "'equalto', 'user') | list -%}{%- set ns.n = ns.n + 1 -%}{{ m.content | upper | replace('a',"
    " 'b') ~ (m.content | length) ~ m['content'][1:3] }}{%- endfor -%}{{ ns.n }}"
    "{{ messages[-1].role if messages else 'none' }}{{ [1, 2, 3] | join(',') }}"
    "{% if not (messages | length > 3) and true %}x{% endif %}{# comment #}{{ 'a' in 'abc' }}",
    "macro": "{% macro fmt(r, c) %}<{{ r }}>{{ c | trim }}{% endmacro %}{% for message in "
    "messages %}{{ fmt(message.role, message.content) }}{% if loop.first %}F{% endif %}"
    "{{ loop.length }}{% endfor %}{{ {'a': 1}.get('a') }}{{ 'x' * 3 }}{{ 7 // 2 }}{{ -3 % 2 }}",
}


def template_seed(tmpl: str, msgs: list[tuple[str, str]], gen: bool = True,
                  tools: str | None = None) -> bytes:
    parts = [tmpl.encode()] + ([tools.encode()] if tools is not None else [])
    for role, content in msgs:
        parts += [role.encode(), content.encode()]
    return bytes([(1 if gen else 0) | (4 if tools is not None else 0)]) + b"\0".join(parts)


# A template with a tool section (written here, of the popular shape: the list in the system
# turn through tojson) and NPC actions as the core passes them (flag bit 2: `tools`).
TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}{{- 'Functions:' }}"
    "{%- for tool in tools %}{{- '\\n' + tool.function.name + ': ' }}"
    "{{- tool.function | tojson(indent=4) }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' or not tools %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
TOOLS_JSON = (
    '[{"type": "function", "function": {"name": "give_item", "description": "Hand over an '
    'item.", "parameters": {"type": "object", "properties": {"item": {"type": "string", "enum": '
    '["sword", "shield"]}, "count": {"type": "integer", "minimum": 1, "maximum": 3}}, '
    '"required": ["item"], "additionalProperties": false}}}, {"type": "function", "function": '
    '{"name": "open_gate", "description": "", "parameters": {"type": "object", "properties": '
    '{}}}}]'
)


def tools_seed() -> None:
    msgs = [("system", "You are Mira, a blacksmith."), ("user", "A sword, please \u00e9!")]
    put("template", "tools.bin", template_seed(TOOLS_TEMPLATE, msgs, tools=TOOLS_JSON))


def template_seeds() -> None:
    import geist
    from geist import models

    msgs = [("system", "You are Mira, a blacksmith."), ("user", "Hello!"),
            ("assistant", "Welcome, traveller."), ("user", "Any swords? {{ 7*7 }} <|im_end|>")]
    for name, path in (("smollm2", models.smollm2_path()), ("gemma3", models.gemma3_path())):
        m = geist.Model.load(path)
        try:
            tmpl = m.meta("tokenizer.chat_template")
        except geist.GeistError:
            continue  # this model file carries no template
        put("template", f"{name}.bin", template_seed(tmpl, msgs))
    for name, tmpl in POPULAR_TEMPLATES.items():
        put("template", f"{name}.bin", template_seed(tmpl, msgs, name != "phi3"))
    put("template", "mistral_alternating.bin",
        template_seed(POPULAR_TEMPLATES["mistral"], [("user", "a"), ("assistant", "b")]))
    tools_seed()


def tokenize_seeds() -> None:
    texts = [b"Hello world! The blacksmith's forge glows.", "Grüße, 世界 — naïve café 🙂".encode(),
             b"<|im_start|>user\nhi<|im_end|>\n<start_of_turn>model\n", b"  \t\n\n  spaces  ",
             b"\xff\xfe\xc3(\xe2\x82 broken utf-8", b"12345 3.14159 x=y+z; if (a) {b();}"]
    for i, t in enumerate(texts):
        for flags in (0, 1, 2, 3, 7):
            put("tokenize", f"text{i}_{flags}.bin", bytes([flags]) + t)
    ids = [1, 2, 100, 5000, 0x7FFFFFFF, 0xFFFFFFFF, 49152, 262144, 3, 17]
    raw = b"".join(struct.pack("<I", v) for v in ids)
    for flags in (8, 9, 8 | 16, 9 | 16, 8 | 32, 9 | 16 | 32):
        put("tokenize", f"ids_{flags}.bin", bytes([flags]) + raw)


def snapshot_seeds() -> None:
    for pick in range(7):
        put("snapshot", f"img{pick}_plain.bin", bytes([pick]))
        # edits in the header: n_past (offset 44), the layer table (88...), then a far edit
        put("snapshot", f"img{pick}_hdr.bin", bytes([pick]) + bytes([44, 0, 0, 1, 92, 0, 0, 0x80]))
        put("snapshot", f"img{pick}_cut.bin", bytes([pick | 32, 5, 60, 0, 0, 2]))
    put("snapshot", "raw.bin", bytes([7]) + b"GEISTSES" + struct.pack("<II", 1, 96) + bytes(24))


def sampler_seeds() -> None:
    def opts(mask: int, *vals: bytes) -> bytes:
        return bytes([mask]) + b"".join(vals) + struct.pack("<I", 42)

    f = lambda x: struct.pack("<f", x)  # noqa: E731
    i = lambda x: struct.pack("<i", x)  # noqa: E731
    head = bytes([9, 0])  # a vocabulary of 9 * 8 + 0 - 8 = 64 (fuzz_sampler.c)
    put("sampler", "default.bin", head + opts(0) + opts(0) + bytes([0, 0]) + bytes(range(1, 65)))
    put("sampler", "greedy_bias.bin", head + opts(1, f(0.0)) + opts(0xFF, f(1.5), i(5), f(0.5),
        f(0.1), f(1.3), f(0.2), f(0.1), i(8)) + bytes([2, 0, 7, 10, 1]) + i(-5) + f(3.0)
        + bytes([0x80]) + bytes(range(3, 67)))
    put("sampler", "nan.bin", head + opts(0x0F, f(float("nan")), i(-1), f(float("inf")), f(-1.0))
        + opts(0) + bytes([0, 1]) + bytes([0xFF]) + f(float("nan")) + bytes(range(9, 72)))


def main() -> None:
    sys.path.insert(0, str(HERE.parent.parent / "python"))
    gguf_seeds()
    template_seeds()
    tokenize_seeds()
    snapshot_seeds()
    sampler_seeds()


if __name__ == "__main__":
    main()
