"""Grammar benchmark (issue 19's speed targets; a script, not a timed test: run it on a quiet
machine, one thread).

1. Mask time over all steps of seeded random sequences of the suite (tests/grammar/suite.py) on
   Gemma 3's 262k vocabulary: mean, median, p99, max. The first pass has every grammar new to
   the model ("cold": its compile, with the token classes it precomputes, happens when its first
   matcher is made, reported separately; contexts beyond the precompute are built by the masks
   that need them, inside the timing); the second pass runs the same sequences again ("warm":
   what a game sees after the first NPC used a grammar).
2. Compile time of an action schema (the first request with a new schema; the model's sorted
   vocabulary is built once before, and reported separately).
3. Decode tokens/s on SmolLM2 with a JSON schema against unconstrained decode.

    PYTHONPATH=python .venv/bin/python tests/bench/bench_grammar.py [--seqs 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grammar"))

from suite import ACTION_SCHEMA, SUITE

import geist
from geist import models
from geist._binding import check, ffi, lib
from geist.grammar import Matcher


def mask_times(m: geist.Model, seqs: int, steps: int,
               compiles: list[float] | None = None) -> list[float]:
    words = np.zeros((m.n_vocab + 31) // 32, dtype=np.uint32)
    buf = ffi.from_buffer("uint32_t[]", words)
    out: list[float] = []
    for gi, (_name, kind, text) in enumerate(SUITE):
        rng = np.random.default_rng(gi)
        for k in range(seqs):
            t = time.perf_counter()
            mt = Matcher(m, text, kind)
            if k == 0 and compiles is not None:
                compiles.append((time.perf_counter() - t) * 1e3)
            for _ in range(steps):
                t = time.perf_counter_ns()
                check(lib.geist_matcher_mask(mt._ptr, buf, len(words)))
                out.append((time.perf_counter_ns() - t) / 1e3)
                bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: m.n_vocab]
                ids = np.flatnonzero(bits)
                ids = ids[[not m.is_end_token(int(i)) for i in ids]] if len(ids) < 8 else ids
                if len(ids) == 0 or mt.is_done:
                    break
                tok = int(ids[rng.integers(len(ids))])
                if m.is_end_token(tok):
                    break
                mt.accept(tok)
    return out


def stats(xs: list[float]) -> str:
    a = np.array(xs)
    return (f"{len(a)} masks: mean {a.mean():.0f} us, median {np.median(a):.0f} us, "
            f"p99 {np.percentile(a, 99):.0f} us, max {a.max():.0f} us")


def decode_tps(m: geist.Model, schema: dict | None, n: int) -> float:
    s = m.session(max_seq_len=512, seed=1)
    kw = {"json_schema": schema} if schema else {}
    r = s.generate("The blacksmith's inventory:", max_tokens=n, temperature=1.0, **kw).result()
    dt = r.elapsed_s - (r.first_token_s or 0.0)
    return (len(r.ids) - 1) / dt if dt > 0 and len(r.ids) > 1 else 0.0


LONG_SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "string", "maxLength": 24}, "maxItems": 40}}, "required": ["items"]}


def decode_only(eng: geist.Engine, rounds: int, n: int) -> int:
    smol = geist.Model.load(models.smollm2_path(), engine=eng)
    decode_tps(smol, LONG_SCHEMA, 8)  # warm the grammar's caches and the model
    us, cs = [], []
    for _ in range(rounds):  # alternating, so drift hits both alike
        us.append(decode_tps(smol, None, n))
        cs.append(decode_tps(smol, LONG_SCHEMA, n))
    u, c = float(np.median(us)), float(np.median(cs))
    print(f"smollm2 decode, medians of {rounds}: unconstrained {u:.1f} tok/s, JSON schema "
          f"{c:.1f} tok/s ({100 * c / u if u else 0:.0f}%); load average after "
          f"{os.getloadavg()[0]:.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=5, help="sequences per grammar")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--decode-tokens", type=int, default=96)
    ap.add_argument("--decode-rounds", type=int, default=0,
                    help="only part 3: this many alternating rounds, medians (quiet machine)")
    ns = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (the numbers need a quiet machine)")
    eng = geist.Engine(n_threads=1)
    if ns.decode_rounds:
        return decode_only(eng, ns.decode_rounds, ns.decode_tokens)
    gemma = geist.Model.load(models.gemma3_path(), engine=eng)
    t = time.perf_counter()
    check(lib.geist_grammar_check(gemma._require(), b'root ::= "x"\n', 1))
    print(f"gemma3 vocabulary sort (once per model): {(time.perf_counter() - t) * 1e3:.1f} ms")
    schema = dict(ACTION_SCHEMA)
    t = time.perf_counter()
    check(lib.geist_grammar_check(gemma._require(), json.dumps(schema).encode(), 2))
    print(f"action schema compile: {(time.perf_counter() - t) * 1e3:.2f} ms")
    schema2 = dict(ACTION_SCHEMA, title="fresh")  # a new text: not in the model's cache
    t = time.perf_counter()
    Matcher(gemma, json.dumps(schema2), 2).mask_words()
    print(f"action schema compile + first mask (its token classes built): "
          f"{(time.perf_counter() - t) * 1e3:.1f} ms")
    compiles: list[float] = []
    cold = mask_times(gemma, ns.seqs, ns.steps, compiles)
    print("gemma3 cold  " + stats(cold))
    print(f"gemma3 suite compile (each grammar's first matcher, its token classes precomputed): "
          f"mean {np.mean(compiles):.1f} ms, max {np.max(compiles):.1f} ms")
    warm = mask_times(gemma, ns.seqs, ns.steps)
    print("gemma3 warm  " + stats(warm))
    smol = geist.Model.load(models.smollm2_path(), engine=eng)
    long_schema = LONG_SCHEMA
    decode_tps(smol, long_schema, 8)  # warm the grammar's caches and the model
    u = decode_tps(smol, None, ns.decode_tokens)
    c = decode_tps(smol, long_schema, ns.decode_tokens)
    print(f"smollm2 decode: unconstrained {u:.1f} tok/s, JSON schema {c:.1f} tok/s "
          f"({100 * c / u if u else 0:.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
