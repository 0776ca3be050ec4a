"""What sampling costs a request's tokens: decode through the runtime (Session.submit) with the
greedy chain and with geist's default chain (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05),
one session and eight at once, for two geist libraries in alternating processes. --chains picks
among greedy, default, top_p (the default without top-k) and top_p_min0 (nor min-p). --draws
times one draw instead (Sampler.sample over the model's own logits, cpu_x86, the median of 101)
for the default chain and top-p without top-k (and without min-p) at temperature 0.8 and 1.5.

    .venv/bin/python tests/bench/sampling_ab.py OLD_LIBGEIST_SO NEW_LIBGEIST_SO MODEL.gguf \
        [--backend cpu_x86] [--threads 2] [--rounds 3] [--chains greedy,default] [--draws] \
        [--json OUT.json]

A figure is ms a token after the first (a request's elapsed time less its first token's, over
its other tokens; eight sessions: the requests' mean, about a step's time), the median of 5 runs
in a process after a warm-up; each round prints both libraries' figures. Prompts are fixed ids,
up to 64 tokens a request (one that ends early counts its own tokens). The load average before
each process is printed and kept: compare rounds of a quiet machine (< 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

CODE = r"""
import json, statistics, sys
from geist import _binding
_binding.load_library(sys.argv[1])
import geist
path, backend, threads = sys.argv[2], sys.argv[3], int(sys.argv[4])
eng = geist.Engine(backend=backend, n_threads=threads)
m = geist.Model.load(path, engine=eng)
chains = {"greedy": {"temperature": 0.0}, "default": {},
          "top_p": {"top_k": 0}, "top_p_min0": {"top_k": 0, "min_p": 0.0}}
out = {}
for name in sys.argv[5].split(","):
    kw = chains[name]
    for n in (1, 8):
        per_tok = []
        for run in range(6):  # the first is a warm-up
            sess = [m.session(max_seq_len=160) for _ in range(n)]
            hs = [s.submit([100 + 7 * i + j for j in range(32)], max_tokens=64, seed=run, **kw)
                  for i, s in enumerate(sess)]
            rs = [h.result(600) for h in hs]
            ms = [1e3 * (r.elapsed_s - r.first_token_s) / (len(r.ids) - 1)
                  for r in rs if r.first_token_s is not None and len(r.ids) > 1]
            if run and ms:
                per_tok.append(statistics.mean(ms))
            for s in sess:
                s.close()
        out[f"{name}/{n}"] = statistics.median(per_tok) if per_tok else None
m.close()
eng.close()
print(json.dumps(out))
"""


# --draws: one draw's price over the model's own logits (the last row of a prompt), by chain,
# `geist.sampling.Sampler.sample`, the median of 101 draws
DRAWS = r"""
import json, statistics, sys, time
from geist import _binding
_binding.load_library(sys.argv[1])
import geist
from geist.sampling import Sampler, SamplerOptions
eng = geist.Engine(backend="cpu_x86", n_threads=2)
m = geist.Model.load(sys.argv[2], engine=eng)
with m.session(max_seq_len=128) as s:
    s.prefill(m.tokenize("The innkeeper leans over the counter and says", add_special=True))
    logits = s.logits().copy()
chains = {"default": {}, "top_k 0": {"top_k": 0},
          "top_k 0, T 1.5": {"top_k": 0, "temperature": 1.5},
          "top_k 0, min_p 0": {"top_k": 0, "min_p": 0.0},
          "top_k 0, min_p 0, T 1.5": {"top_k": 0, "min_p": 0.0, "temperature": 1.5}}
out = {}
for name, kw in chains.items():
    sp = Sampler(m.n_vocab, SamplerOptions().replace(**kw))
    ts = []
    for _ in range(101):
        t0 = time.perf_counter()
        sp.sample(logits)
        ts.append(1e3 * (time.perf_counter() - t0))
    out[name] = statistics.median(ts)
    sp.close()
m.close()
eng.close()
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("model")
    ap.add_argument("--backend", default="cpu_x86")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chains", default="greedy,default")
    ap.add_argument("--draws", action="store_true")
    ap.add_argument("--json")
    ns = ap.parse_args()
    rows: dict[str, Any] = {}
    for rnd in range(ns.rounds):
        for name, lib in (("old", ns.old), ("new", ns.new)):
            load = os.getloadavg()[0]
            args = ([DRAWS, lib, ns.model] if ns.draws
                    else [CODE, lib, ns.model, ns.backend, str(ns.threads), ns.chains])
            p = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True,
                               timeout=1800)
            if p.returncode:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(p.stdout.strip().splitlines()[-1])
            rows[f"{name}/{rnd}"] = {"load_1min": load, **r}
            print(f"{name} round {rnd} (load {load:.2f}): "
                  + ", ".join(f"{k} {v:.3f} ms" for k, v in r.items() if v is not None),
                  flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
