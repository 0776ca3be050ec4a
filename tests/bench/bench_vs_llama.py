"""geist against llama.cpp (llama-cpp-python) on the same model, threads and token counts.

Each run is a fresh process (so peak RSS is the run's own); runs alternate geist, llama.cpp,
geist, ... so that drift of the machine (thermal, other load) hits both alike. Per run: load time,
prefill t/s for each --pp (a random prompt, fresh context), decode t/s for --tg tokens after a
128-token prompt, and peak RSS minus the RSS before loading. Prints a table (median and spread
max-min) and the ratios geist / llama.cpp; --json FILE writes everything.

llama.cpp comes from tests/bench/install_llama_cpp.sh (its own venv, only for benchmarking):
    nice -n 19 tests/bench/install_llama_cpp.sh
    .venv/bin/python tests/bench/bench_vs_llama.py --threads 2 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

LLAMA_PY = Path.home() / ".cache" / "geist" / "llama-venv" / "bin" / "python"

# One run in a child process: prints one JSON line. Shared by both sides; `side` picks the engine.
WORKER = r"""
import json, resource, sys, time
import numpy as np
side, path, threads, pps, tg, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    [int(v) for v in sys.argv[4].split(",")], int(sys.argv[5]), sys.argv[6]
def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
base = rss_kib()
n_ctx = max(max(pps), 128 + tg) + 8
out = {"side": side}
t0 = time.perf_counter()
if side == "geist":
    import geist
    eng = geist.Engine(backend=None if backend == "auto" else backend, n_threads=threads)
    model = geist.Model.load(path, engine=eng)
    n_vocab = model.n_vocab
else:
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                n_batch=512, n_ubatch=512, verbose=False)
    n_vocab = llm.n_vocab()
out["load_s"] = time.perf_counter() - t0
rng = np.random.default_rng(0)
def prompt(n):
    return [int(v) for v in rng.integers(10, n_vocab - 10, n)]
for n in pps:
    p = prompt(n)
    if side == "geist":
        with model.session(max_seq_len=n_ctx) as s:
            t0 = time.perf_counter(); s.prefill(p); dt = time.perf_counter() - t0
    else:
        llm.reset(); llm._ctx.kv_cache_clear()
        t0 = time.perf_counter(); llm.eval(p); dt = time.perf_counter() - t0
    out[f"pp{n}_tps"] = n / dt
p, forced = prompt(128), prompt(tg)
if side == "geist":
    with model.session(max_seq_len=n_ctx) as s:
        s.prefill(p)
        t0 = time.perf_counter()
        for t in forced:
            s.step(t)
        dt = time.perf_counter() - t0
    out["backend"] = model.backend
else:
    llm.reset(); llm._ctx.kv_cache_clear()
    llm.eval(p)
    t0 = time.perf_counter()
    for t in forced:
        llm.eval([t])
    dt = time.perf_counter() - t0
    out["backend"] = "llama.cpp"
out[f"tg{tg}_tps"] = tg / dt
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["base_rss_mib"] = base / 1024
import os
out["loadavg_1m"] = os.getloadavg()[0]
print(json.dumps(out))
"""


def run_one(py: str, side: str, path: str, threads: int, pps: list[int], tg: int,
            backend: str) -> dict[str, float | str]:
    res = subprocess.run(
        [py, "-c", WORKER, side, path, str(threads), ",".join(map(str, pps)), str(tg), backend],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},  # numpy's BLAS threads stay idle
    )
    if res.returncode != 0:
        raise RuntimeError(f"{side} run failed:\n{res.stderr[-2000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def summarize(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "spread": max(xs) - min(xs), "min": min(xs),
            "max": max(xs), "n": len(xs)}


def model_path(name: str) -> str:
    p = Path(name)
    if p.exists():
        return str(p)
    from geist import models

    return str(models.get(name))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pp", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--backend", default="auto", help="geist backend")
    ap.add_argument("--no-llama", action="store_true", help="geist only")
    ap.add_argument("--llama-python", default=str(LLAMA_PY))
    ap.add_argument("--json", default=None, help="write the results here")
    ns = ap.parse_args()
    if not ns.no_llama and not Path(ns.llama_python).exists():
        print(f"no llama.cpp venv at {ns.llama_python}: run tests/bench/install_llama_cpp.sh",
              file=sys.stderr)
        return 2
    metrics = ["load_s"] + [f"pp{n}_tps" for n in ns.pp] + [f"tg{ns.tg}_tps", "rss_mib"]
    report: dict[str, object] = {"threads": ns.threads, "runs": ns.runs, "models": {}}
    for name in ns.models:
        path = model_path(name)
        sides = ["geist"] + ([] if ns.no_llama else ["llama.cpp"])
        raw: dict[str, list[dict[str, float | str]]] = {s: [] for s in sides}
        for i in range(ns.runs):
            for side in sides:
                py = sys.executable if side == "geist" else ns.llama_python
                r = run_one(py, "geist" if side == "geist" else "llama", path, ns.threads,
                            ns.pp, ns.tg, ns.backend)
                r["rss_mib"] = float(r["peak_rss_mib"]) - float(r["base_rss_mib"])
                raw[side].append(r)
                print(f"  {Path(path).name} run {i + 1} {side}: "
                      + " ".join(f"{m}={float(r[m]):.2f}" for m in metrics)
                      + f" (load avg {float(r['loadavg_1m']):.1f})", file=sys.stderr)
        summ = {s: {m: summarize([float(r[m]) for r in raw[s]]) for m in metrics} for s in sides}
        entry: dict[str, object] = {"path": path, "file_mib": os.path.getsize(path) / 2**20,
                                    "runs": raw, "summary": summ}
        if not ns.no_llama:
            entry["ratio"] = {m: summ["geist"][m]["median"] / summ["llama.cpp"][m]["median"]
                              for m in metrics if m.endswith("_tps")}
        report["models"][name] = entry  # type: ignore[index]
        print(f"\n{Path(path).name}, {ns.threads} threads, median ± spread of {ns.runs} runs")
        print(f"{'':<10}" + "".join(f"{m:>20}" for m in metrics))
        for s in sides:
            print(f"{s:<10}" + "".join(
                f"{summ[s][m]['median']:>12.2f} ±{summ[s][m]['spread']:<6.2f}" for m in metrics))
        if not ns.no_llama:
            ratio = entry["ratio"]
            print(f"{'ratio':<10}" + "".join(
                f"{ratio[m]:>19.2f}x" if m in ratio else f"{'':>20}"  # type: ignore[operator]
                for m in metrics))
    if ns.json:
        Path(ns.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
