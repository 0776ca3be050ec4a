"""Issue 19's generation check over the whole grammar suite: every output the runtime samples
under a grammar parses, on both real models, greedy and at temperature 1.0.

For each grammar or schema of tests/grammar/suite.py, each model (SmolLM2, Gemma 3) and each
temperature (0.0, 1.0) a chat reply is generated under the grammar. A reply that finished with
"stop" must be a whole sentence of it: JSON schemas through `json.loads` and `jsonschema`
validation against the original schema, GBNF grammars through llguidance (the oracle of
tests/grammar/oracle.py) consuming the reply's tokens and accepting at the end. A reply cut by
max_tokens ("grammar" or "length": an unbounded grammar such as arithmetic can go on) must still
be a prefix llguidance accepts token by token; the script counts both.

    PYTHONPATH=python .venv/bin/python tests/bench/grammar_generate_check.py [--max-tokens 96]
        [--models smollm2,gemma3] [--seeds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grammar"))

import jsonschema
import llguidance
import oracle
from suite import SUITE

import geist
from geist import models
from geist.grammar import JSON_SCHEMA, json_schema_to_gbnf

PROMPT = "Answer with one value in the required format. Be brief."


def check_one(m: geist.Model, name: str, kind: int, text: str, temperature: float,
              seed: int, max_tokens: int) -> tuple[str, str]:
    """('ok' | 'cut' | 'FAIL', detail)."""
    s = m.session(max_seq_len=512, seed=seed)
    talk = [{"role": "user", "content": f"{PROMPT} ({name})"}]
    kw = {"json_schema": text} if kind == JSON_SCHEMA else {"grammar": text}
    r = s.chat(talk, max_tokens=max_tokens, temperature=temperature, **kw).result()
    ids = [i for i in r.ids if not m.is_end_token(int(i))]
    ll_text = json_schema_to_gbnf(text) if kind == JSON_SCHEMA else text
    lm = llguidance.LLMatcher(oracle.ll_tokenizer(m), oracle.ll_grammar(ll_text), log_level=0)
    for t in ids:
        if not lm.consume_token(int(t)):
            return "FAIL", f"llguidance rejects token {t} of {r.text!r}: {lm.get_error()}"
    if r.finish_reason != "stop":
        return "cut", f"{r.finish_reason} after {len(ids)} tokens: {r.text[:60]!r}"
    if not lm.is_accepting():
        return "FAIL", f"finished 'stop' but llguidance does not accept the end: {r.text!r}"
    if kind == JSON_SCHEMA:
        try:
            jsonschema.validate(json.loads(r.text), json.loads(text))
        except (ValueError, jsonschema.ValidationError) as e:
            return "FAIL", f"{r.text!r}: {e}"
    return "ok", r.text[:60]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per grammar at temperature 1.0")
    ap.add_argument("-v", action="store_true", help="print every reply")
    ns = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    fails = 0
    for which in ns.models.split(","):
        path = models.smollm2_path() if which == "smollm2" else models.gemma3_path()
        m = geist.Model.load(path)
        for temperature in (0.0, 1.0):
            counts = {"ok": 0, "cut": 0, "FAIL": 0}
            t0 = time.perf_counter()
            for name, kind, text in SUITE:
                for seed in range(1 if temperature == 0.0 else ns.seeds):
                    verdict, detail = check_one(m, name, kind, text, temperature, seed,
                                                ns.max_tokens)
                    counts[verdict] += 1
                    if verdict != "ok" or ns.v:
                        print(f"  {which} T={temperature} {name} seed {seed}: {verdict} {detail}")
            fails += counts["FAIL"]
            print(f"{which} T={temperature}: {counts['ok']} complete and valid, {counts['cut']} "
                  f"cut by max_tokens (valid prefixes), {counts['FAIL']} invalid "
                  f"({time.perf_counter() - t0:.0f} s)")
    return 1 if fails else 0


if __name__ == "__main__":
    raise SystemExit(main())
