"""NPC actions (geist.h "Actions"): functions of the game an NPC may call in its reply.

A request with `actions=` constrains the reply to the engine's action format: speech (plain text,
streamed as usual), then optionally one call line `<call>{"name":...,"arguments":{...}}` whose
arguments match the action's JSON Schema. The speech is the result's `text`; the call, parsed,
is the result's `action` (an ActionCall), or None when the NPC only spoke.

    give = Action("give_item", "Hand the player an item.",
                  {"type": "object", "properties": {"item": {"enum": ["sword", "shield"]}},
                   "required": ["item"], "additionalProperties": False})
    res = npc.chat(talk, actions=[give]).result()
    if res.action:
        game.give(**res.action.arguments)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from geist._binding import ffi

__all__ = ["ACTION_CHOICES", "Action", "ActionCall", "action_from", "fill_request"]

# geist_action_choice
ACTION_CHOICES: dict[str, int] = {
    k.removeprefix("GEIST_ACTION_").lower(): v
    for k, v in dict(ffi.typeof("geist_action_choice").relements).items()
}


@dataclass(frozen=True)
class Action:
    """One action: name ([A-Za-z_][A-Za-z0-9_]*, at most 64 characters), what it does (for the
    prompt), and a JSON Schema of its arguments object (a dict or JSON text; None = no
    arguments)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | str | None = None

    def parameters_json(self) -> str | None:
        if self.parameters is None:
            return None
        if isinstance(self.parameters, str):
            return self.parameters
        return json.dumps(self.parameters, separators=(",", ":"))


@dataclass(frozen=True)
class ActionCall:
    """The call a reply made: the action's name and its arguments (JSON types: int, float, str,
    bool, list, dict), already matching the action's schema."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    json: str = field(default="", compare=False)  # the call as the model wrote it

    @staticmethod
    def from_json(text: str) -> ActionCall:
        obj = json.loads(text)
        return ActionCall(str(obj["name"]), dict(obj["arguments"]), text)

    @property
    def line(self) -> str:
        """The call line of the reply (`<call>{...}`): append it to the speech, after a newline,
        to keep the call in the conversation's assistant message."""
        return "<call>" + (self.json or json.dumps({"name": self.name,
                                                     "arguments": self.arguments},
                                                    separators=(",", ":")))


def action_from(a: Action | Mapping[str, Any]) -> Action:
    """An Action from itself or a {name, description, parameters} dict."""
    if isinstance(a, Action):
        return a
    return Action(str(a["name"]), str(a.get("description", "")), a.get("parameters"))


def fill_request(req: Any, actions: Sequence[Action | Mapping[str, Any]], choice: str,
                 keep: list[Any]) -> None:
    """Points the geist_request at a geist_action array (cffi objects kept alive in keep)."""
    if choice not in ACTION_CHOICES:
        raise ValueError(f"action_choice must be one of {sorted(ACTION_CHOICES)}, got {choice!r}")
    acts = [action_from(a) for a in actions]
    arr = ffi.new("geist_action[]", max(len(acts), 1))
    keep.append(arr)

    def cstr(s: str) -> Any:
        data = s.encode("utf-8")
        if b"\0" in data:
            raise ValueError("action fields must not contain NUL characters")
        c = ffi.new("char[]", data)
        keep.append(c)
        return c

    for i, a in enumerate(acts):
        arr[i].name = cstr(a.name)
        arr[i].description = cstr(a.description) if a.description else ffi.NULL
        params = a.parameters_json()
        arr[i].parameters = cstr(params) if params is not None else ffi.NULL
    req.actions = arr
    req.n_actions = len(acts)
    req.action_choice = ACTION_CHOICES[choice]
