"""The grammar suite checked against llguidance: GBNF grammars and JSON schemas (compared through
the GBNF geist compiles them to, see oracle.py). Each entry: (name, kind, text)."""

from __future__ import annotations

import json

from geist.grammar import GBNF, JSON_SCHEMA

ACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "say": {"type": "string", "maxLength": 60},
        "action": {"enum": ["give_item", "open_gate", "none"]},
        "item": {"type": "string", "enum": ["sword", "shield", "potion"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 20},
    },
    "required": ["say", "action"],
    "additionalProperties": False,
}

_SCHEMAS: dict[str, object] = {
    "schema_action": ACTION_SCHEMA,
    "schema_nested": {
        "type": "object",
        "properties": {
            "npc": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 16},
                    "level": {"type": "integer", "minimum": 0, "maximum": 99},
                },
                "required": ["name", "level"],
            },
            "hostile": {"type": "boolean"},
        },
        "required": ["npc", "hostile"],
    },
    "schema_enum": {"enum": ["north", "south", "east", "west", 42, None, True]},
    "schema_int_bounds": {"type": "integer", "minimum": -250, "maximum": 1234},
    "schema_int_min": {"type": "integer", "minimum": 17},
    "schema_number": {"type": "number"},
    "schema_number_bounds": {"type": "number", "minimum": 0, "maximum": 100},
    "schema_list": {
        "type": "array",
        "items": {"type": "string", "maxLength": 8},
        "minItems": 1,
        "maxItems": 4,
    },
    "schema_anyof": {
        "anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}, {"type": "null"}]
    },
    "schema_optional_props": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"const": 'x"y'}},
        "additionalProperties": False,
    },
    "schema_any_value": {"type": "object", "properties": {"data": {}}, "required": ["data"]},
    "schema_type_list": {"type": ["string", "null"], "maxLength": 10},
}

_GBNF: dict[str, str] = {
    "gbnf_json_like": r"""root ::= "{" ws "\"name\":" ws str ws "}"
str ::= "\"" [a-z ]* "\""
ws ::= [ ]?
""",
    "gbnf_arith": r"""root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
""",
    "gbnf_repeat": r"""root ::= "id-" [0-9]{2,4} ("-" [A-Z]{1,3})? "!"{0,2}
""",
    "gbnf_alternation": r"""# a choice of greetings
root ::= greeting " " name ("." | "!")
greeting ::= "Hello" | "Hi" | "Good day" | "Greetings"
name ::= "traveller" | "friend" | [A-Z] [a-z]+
""",
    "gbnf_unicode": r"""root ::= "« " [à-ÿ]+ " » " [一-龥]{1,3} [^\x00-\x7F]?
""",
    "gbnf_negated": r"""root ::= "\"" ( [^"\\\n] | "\\" [nt"\\] )* "\"" "\n"
""",
    "gbnf_list": r"""root ::= item ("," " "? item)* "\n"?
item ::= "apple" | "apricot" | "banana" | "band" | [0-9]+
""",
    "gbnf_nested_groups": r"""root ::= (("a" | "b")+ ("c" ("d" | "e")*)?)+ "."
""",
    "gbnf_escapes": r"""root ::= "\x41\u00e9\t" [\x30-\x39\u0100-\u017F] "\U0001F600"?
""",
    "gbnf_any": r"""root ::= "say: " .{0,6} "\n"
""",
}

SUITE: list[tuple[str, int, str]] = [(k, GBNF, v) for k, v in _GBNF.items()] + [
    (k, JSON_SCHEMA, json.dumps(v)) for k, v in _SCHEMAS.items()
]

# Counted repetitions, which the matcher's shared chain walks handle (docs/GRAMMAR.md, "Counted
# repetitions"): two chains over the same bytes (ambiguous splits), nested chains, a chain whose
# link is not prefix-free (no shared walk), multi-byte characters, a minimum count, a
# hand-written chain whose last link is also used elsewhere, strings in a list with a count.
CHAIN_CASES: list[tuple[str, int, str]] = [
    (k, GBNF, v) for k, v in {
        "chain_two_over_same_bytes": 'root ::= [a-z]{0,5} [a-z]{0,3} "."\n',
        "chain_nested": 'root ::= ("x" [a-c]{0,3}){0,4} "!"\n',
        "chain_not_prefix_free": 'root ::= ("a" | "ab"){0,5} "c"\n',
        "chain_utf8": 'root ::= [^\\x00-\\x7F]{0,7} "|" [0-9]{1,12}\n',
        "chain_min_count": 'root ::= "<" [a-f0-9]{3,9} ">" ([a-z]{0,2} ",")* "."\n',
        "chain_shared_link": 'root ::= r2 r1 "."\nr2 ::= "q" r1 | ""\nr1 ::= "q" | ""\n',
        "chain_of_strings": 'root ::= "[" (str ("," str){0,5})? "]"\n'
                            'str ::= "\\"" [^"\\\\]{0,12} "\\""\n',
    }.items()
]
