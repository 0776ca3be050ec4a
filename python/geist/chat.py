"""Chat templates: render a model's Jinja chat template (or a given one) for a list of messages.

The native engine implements the Jinja2 subset GGUF chat templates use, with the semantics of
`jinja2.Environment(trim_blocks=True, lstrip_blocks=True)` as Hugging Face transformers renders
chat templates (one trailing newline of the template dropped) and `messages`,
`add_generation_prompt`, `bos_token`, `eos_token` and `raise_exception()` in the context. See
native/src/chat/template.h for the exact subset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from geist._binding import ERR_BUFFER_TOO_SMALL, check, ffi, lib


def _model_ptr(model: Any) -> Any:
    ptr = getattr(model, "_ptr", None)
    if ptr is None:
        raise ValueError("model is closed or not a geist.Model")
    return ptr


def _cstr(text: str, what: str) -> Any:
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ValueError(f"{what} must not contain NUL characters")
    return ffi.new("char[]", data)


def apply_template(
    model: Any,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
    template: str | None = None,
) -> str:
    """Renders `template` (default: the model's `tokenizer.chat_template`, or ChatML when the
    model has none) for messages of {"role": ..., "content": ...}.

    Raises geist.BadFormatError for a template syntax/runtime error (the message gives the byte
    offset) and geist.InvalidArgumentError when the template calls raise_exception() (the
    message is the template's)."""
    ptr = _model_ptr(model)
    keep: list[Any] = []
    arr = ffi.new("geist_chat_message[]", max(len(messages), 1))
    for i, msg in enumerate(messages):
        role = _cstr(str(msg["role"]), "role")
        content = _cstr(str(msg["content"]), "content")
        keep += [role, content]
        arr[i].role = role
        arr[i].content = content
    tmpl = _cstr(template, "template") if template is not None else ffi.NULL
    needed = ffi.new("size_t *")
    cap = 4096
    while True:
        buf = ffi.new("char[]", cap)
        status = lib.geist_chat_apply_template(
            ptr, tmpl, arr, len(messages), 1 if add_generation_prompt else 0, buf, cap, needed
        )
        if status == ERR_BUFFER_TOO_SMALL and int(needed[0]) > cap:
            cap = int(needed[0])
            continue
        check(status)
        return bytes(ffi.buffer(buf, int(needed[0]) - 1)).decode("utf-8", "replace")
