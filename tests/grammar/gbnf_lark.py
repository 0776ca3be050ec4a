"""GBNF (llama.cpp's syntax, as geist parses it) to llguidance's Lark, for the oracle.

llguidance's own GBNF converter (llguidance.gbnf_to_lark) turns rules without recursion into
lexer terminals, and its lexer then matches them as regular expressions (a nullable terminal such
as `ws ::= [ ]?` changes what may follow): the languages are the same but the token masks are not
always. This converter keeps every rule a parser rule and makes each lexeme one character (a class
or a one-character string: llguidance's lexer takes the longest lexeme, which for
multi-character literals such as "100" beside [0-9] would change the language), so
llguidance's masks are those of the grammar itself, byte for byte.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z0-9_-]+")


class _P:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.names: dict[str, str] = {}

    def name(self, n: str) -> str:
        if n == "root":
            return "start"
        if n not in self.names:
            self.names[n] = f"r{len(self.names)}_" + re.sub(r"[^a-z0-9_]", "_", n.lower())
        return self.names[n]

    def space(self, nl: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            elif nl and c in "\r\n":
                self.i += 1
            else:
                break

    def char(self) -> int:
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        e = self.s[self.i + 1]
        self.i += 2
        simple = {"t": 9, "n": 10, "r": 13, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94}
        if e in simple:
            return simple[e]
        digits = {"x": 2, "u": 4, "U": 8}[e]
        v = int(self.s[self.i : self.i + digits], 16)
        self.i += digits
        return v

    def seq(self, nested: bool) -> list[str]:
        items: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                cps = []
                while self.s[self.i] != '"':
                    cps.append(self.char())
                self.i += 1
                atom = " ".join(_lit(cps)) if cps else ""
                if len(cps) > 1:
                    atom = f"({atom})"
            elif c in "[.":
                atom = self.cls()
            elif c == "(":
                self.i += 1
                self.space(True)
                alts = self.alts(True)
                self.i += 1  # ')'
                atom = "(" + alts + ")"
            elif _WORD.match(self.s, self.i):
                m = _WORD.match(self.s, self.i)
                assert m
                self.i = m.end()
                atom = self.name(m.group(0))
            else:
                break
            self.space(nested)
            while self.i < len(self.s) and self.s[self.i] in "*+?{":
                op = self.s[self.i]
                self.i += 1
                if op == "{":
                    j = self.s.index("}", self.i)
                    body = self.s[self.i : j].replace(" ", "")
                    self.i = j + 1
                    if "," in body:
                        lo_s, hi_s = body.split(",")
                        lo = int(lo_s)
                        if hi_s == "":
                            atom = f"({atom}{{{lo}}} {atom}*)" if lo else f"({atom})*"
                        else:
                            atom = f"({atom}){{{lo},{int(hi_s)}}}"
                    else:
                        atom = f"({atom}){{{int(body)}}}"
                else:
                    atom = f"({atom}){op}"
                self.space(nested)
            if atom:
                items.append(atom)
        return items

    def cls(self) -> str:
        if self.s[self.i] == ".":
            self.i += 1
            return r"/(?s:.)/"
        self.i += 1
        neg = self.s[self.i] == "^"
        if neg:
            self.i += 1
        parts = []
        while self.s[self.i] != "]":
            lo = self.char()
            hi = lo
            if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                self.i += 1
                hi = self.char()
            parts.append(f"\\x{{{lo:x}}}" + (f"-\\x{{{hi:x}}}" if hi != lo else ""))
        self.i += 1
        return "/[" + ("^" if neg else "") + "".join(parts) + "]/"

    def alts(self, nested: bool) -> str:
        out = [self.seq(nested)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            self.space(True)
            out.append(self.seq(nested))
        non_empty = [" ".join(a) for a in out if a]
        body = " | ".join(non_empty)
        if len(non_empty) < len(out):
            return f"({body})?" if non_empty else '""'
        return body


def _lit(cps: list[int]) -> list[str]:
    """A literal as one-character Lark lexemes ("1" "0" "0", not "100"): llguidance's lexer takes
    the longest lexeme (maximal munch), so with "100" beside [0-9] it would not let "10" end a
    number; one-character lexemes leave the grammar's own semantics. Printable ASCII as strings,
    the rest as \\x{..} regexes."""
    out: list[str] = []
    for cp in cps:
        if 0x20 <= cp < 0x7F:
            c = chr(cp)
            out.append('"' + ("\\" + c if c in '"\\' else c) + '"')
        else:
            out.append(f"/\\x{{{cp:x}}}/")
    return out


def gbnf_to_lark(text: str) -> str:
    p = _P(text)
    rules: list[str] = []
    p.space(True)
    while p.i < len(p.s):
        m = _WORD.match(p.s, p.i)
        assert m, p.s[p.i : p.i + 20]
        name = p.name(m.group(0))
        p.i = m.end()
        p.space(False)
        assert p.s.startswith("::=", p.i)
        p.i += 3
        p.space(True)
        rules.append(f"{name}: {p.alts(False)}")
        p.space(True)
    return "\n".join(rules) + "\n"
