"""The full llguidance comparison of issue 19: 200 seeded sequences per grammar of the suite per
real model (SmolLM2 49k, Gemma 3 262k); geist's allowed-token set must equal llguidance's at every
step. Slow (minutes): run by hand, not in CI.

    PYTHONPATH=python .venv/bin/python tests/bench/grammar_oracle_full.py \
        [--seqs 200] [--models smollm2 gemma3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grammar"))

import oracle
from suite import SUITE

import geist
from geist import models
from geist.grammar import JSON_SCHEMA, json_schema_to_gbnf


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=200)
    ap.add_argument("--steps", type=int, default=40, help="most steps per sequence")
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--only", nargs="*", default=None, help="suite entries to run (default: all)")
    ns = ap.parse_args()
    failed = 0
    for which in ns.models:
        m = geist.Model.load(models.smollm2_path() if which == "smollm2" else models.gemma3_path())
        total = 0
        t0 = time.perf_counter()
        for i, (name, kind, text) in enumerate(SUITE):
            if ns.only and name not in ns.only:
                continue
            ll = json_schema_to_gbnf(text) if kind == JSON_SCHEMA else None
            r = oracle.run_sequences(m, text, ns.seqs, ns.steps, seed=5000 + i, kind=kind,
                                     ll_text=ll)
            total += r["steps"]
            status = "ok" if r["ok"] else f"MISMATCH {r}"
            failed += not r["ok"]
            print(f"{which:8s} {name:24s} {r['steps']:6d} steps {status}", flush=True)
        n_g = len(ns.only) if ns.only else len(SUITE)
        print(f"{which}: {n_g} grammars x {ns.seqs} sequences, {total} steps compared, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    print("ALL EQUAL" if not failed else f"{failed} grammar(s) differ")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
