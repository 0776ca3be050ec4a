"""geist against llama.cpp's own tools (llama-bench, llama-batched-bench) on this machine: the
canonical CPU comparison. Same model, threads and token counts; sets alternate (geist, llama.cpp,
geist, ...) and every set records the load average, since llama.cpp's spinning OpenMP workers
lose far more than geist to other load: sets taken at a load average above 0.5 are flagged and
left out of the medians.

    nice -n 19 tests/bench/install_llama_tools.sh          # once: builds the two tools (cached)
    .venv/bin/python tests/bench/bench_llama_tools.py [--models smollm2 gemma3] [--sets 3]
        [--threads 2] [--json OUT] [--settle SECONDS]

Protocols, matched to llama.cpp's:
- pp128: 128 random ids run from an empty context (llama-bench -p 128), 5 repetitions a set.
- tg128: 128 decode steps of fixed ids from an empty context, no sampling (llama-bench -n 128).
- npl N: llama-batched-bench -npp 32 -ntg 64 -npl 1,2,4,8 (S_TG: decode tokens/s of all N
  sequences); geist: N sessions prefill 32 random ids, then 64 decode steps of all N together
  through the runtime (greedy; the decode part of the wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

import geist
from geist import models

TOOLS = Path.home() / ".cache" / "geist" / "llama-tools" / "build" / "bin"
NPL = (1, 2, 4, 8)


def geist_set(path: Path, threads: int, reps: int = 5) -> dict[str, Any]:
    eng = geist.Engine(n_threads=threads)
    m = geist.Model.load(path, engine=eng)
    rng = np.random.default_rng(1)
    pp, tg = [], []
    for r in range(reps + 1):  # the first is a warm-up
        ids = [int(x) for x in rng.integers(100, m.n_vocab - 100, 128)]
        with m.session(max_seq_len=256) as s:
            t0 = time.perf_counter()
            s.prefill(ids)
            t1 = time.perf_counter()
        with m.session(max_seq_len=256) as s:
            t2 = time.perf_counter()
            for tok in ids:
                s.decode(tok)
            t3 = time.perf_counter()
        if r:
            pp.append(128 / (t1 - t0))
            tg.append(128 / (t3 - t2))
    batched = {}
    for n in NPL:
        sess = [m.session(max_seq_len=128) for _ in range(n)]
        prompts = [[int(x) for x in rng.integers(100, m.n_vocab - 100, 32)] for _ in range(n)]
        t0 = time.perf_counter()
        hs = [s.submit(p, max_tokens=64, temperature=0.0) for s, p in zip(sess, prompts,
                                                                           strict=True)]
        res = [h.result(600) for h in hs]
        t_end = time.perf_counter()
        first = max(t0 + (r.first_token_s or 0.0) for r in res)
        decoded = sum(max(len(r.ids) - 1, 0) for r in res)
        batched[n] = decoded / max(t_end - first, 1e-9)
        for s in sess:
            s.close()
    m.close()
    eng.close()
    return {"pp128": statistics.median(pp), "tg128": statistics.median(tg), "npl": batched}


def llama_set(path: Path, threads: int) -> dict[str, Any]:
    out = subprocess.run([str(TOOLS / "llama-bench"), "-m", str(path), "-t", str(threads), "-p",
                          "128", "-n", "128", "-r", "5", "-o", "json"], capture_output=True,
                         text=True, check=True).stdout
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == 128 and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == 128 and r["n_prompt"] == 0)
    tab = subprocess.run([str(TOOLS / "llama-batched-bench"), "-m", str(path), "-t", str(threads),
                          "-c", "4096", "-b", "512", "-ub", "512", "-npp", "32", "-ntg", "64",
                          "-npl", ",".join(map(str, NPL)), "--kv-unified"],
                         capture_output=True, text=True, check=True).stdout
    batched = {}
    for line in tab.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # columns: PP TG B N_KV T_PP S_PP T_TG S_TG T S
        if len(cells) >= 10 and cells[0] == "32" and cells[1] == "64":
            batched[int(cells[2])] = float(cells[7])  # S_TG t/s
    return {"pp128": pp, "tg128": tg, "npl": batched}


def settle(limit_s: float) -> None:
    """Waits (up to limit_s) for the 1-minute load average to fall below 0.5: a set's own two
    busy threads leave it near 1.5-2 when the set ends, and it decays with a 1-minute time
    constant, so back-to-back sets would each start above the protocol's bound."""
    t_end = time.monotonic() + limit_s
    while os.getloadavg()[0] >= 0.5 and time.monotonic() < t_end:
        time.sleep(5.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="")
    ap.add_argument("--settle", type=float, default=150.0,
                    help="seconds to wait at most, before each set, for load average < 0.5")
    a = ap.parse_args()
    if not (TOOLS / "llama-bench").is_file():
        print(f"llama.cpp's tools not found in {TOOLS}: run tests/bench/install_llama_tools.sh")
        return 2
    report: dict[str, Any] = {}
    for name in a.models:
        path = models.get(name)
        sets = []
        for i in range(a.sets):
            for side, fn in (("geist", geist_set), ("llama", llama_set)):
                settle(a.settle)
                load = os.getloadavg()[0]
                r = fn(path, a.threads)
                r.update(side=side, set=i, load_before=load, load_after=os.getloadavg()[0])
                sets.append(r)
                print(name, side, i, f"load {load:.2f}", {k: r[k] for k in ("pp128", "tg128")},
                      {n: round(v, 1) for n, v in r["npl"].items()}, flush=True)
        quiet = [s for s in sets if s["load_before"] < 0.5] or sets

        def med(side: str, key: str, n: int | None = None,
                pool: list[dict[str, Any]] = quiet) -> float:
            vals = [s[key] if n is None else s["npl"].get(n, float("nan")) for s in pool
                    if s["side"] == side]
            return statistics.median(vals) if vals else float("nan")

        summary = {}
        for key in ("pp128", "tg128"):
            g, lc = med("geist", key), med("llama", key)
            summary[key] = {"geist": g, "llama": lc, "ratio": g / lc}
        for n in NPL:
            g, lc = med("geist", "npl", n), med("llama", "npl", n)
            summary[f"npl{n}"] = {"geist": g, "llama": lc, "ratio": g / lc}
        report[name] = {"sets": sets, "summary": summary,
                        "quiet_sets": len(quiet), "all_sets": len(sets)}
        print(name, json.dumps(summary, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
