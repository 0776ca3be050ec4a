"""Where a decode token's GPU time goes, for several geist libraries in one device call (session
18): for each library and model, `geist bench --backend vulkan --runs 3 --pp 16 --tg 128` (the
GPU time by timestamps around each pass, tg128) and the same with `--profile` (the GPU time by
role, a timestamp after every dispatch), each library in its own process, read from
`geist bench --json` (not its printed table).

    python3 .dev-gpu/roles.py OUT.json LIB.so[@ARG,ARG...] [...] [--model NAME=PATH ...] [--tg N]

A library's @ARGs go to its `geist bench` runs (`lib.so@--attn-chunk=16`: its chunk size; the
result's name then carries them: `lib@--attn-chunk=16`).

`--npcs N` (session 22) profiles N sessions decoding together through the runtime instead
(batched steps of N rows: issue 16's 8-session target): each session's prompt goes in first
(a one-token reply), then N requests of --tg tokens each, greedy, run at once between two
device-profile snapshots. The result is per pass (a pass: one batched step, its requests' short
prompts' rows included): GPU ms, dispatches, and the GPU time by role; `plain` holds the same
run unprofiled (session 26: a timestamp after every dispatch keeps the sessions' attention
dispatches from overlapping, so only the plain run's GPU ms a pass says what they cost).
Only --attn-chunk=N and --attn-per-head and --fast are taken as @ARGs there (Engine's
attn_chunk, attn_per_head, fast).

Run from the checkout root there, with the kit's environment (as ab.py); models: the stand-ins
setup made. The libraries are typically stubs.py's: a kernel with one part left out, whose
results are wrong and whose time says what that part costs.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODELS = {"gemma3": "/opt/gpukit/models/gemma3.gguf", "smollm2": "/opt/gpukit/models/smollm2.gguf"}
# one library and model: the plain run and the profiled run, `geist bench --json`'s rows each
CODE = """
import contextlib, io, json, sys
from geist import _binding
_binding.load_library(sys.argv[1])
from geist.cli import main
common = ["bench", sys.argv[2], "--backend", "vulkan", "--pp", "16", "--tg", sys.argv[3], "--json",
          *sys.argv[4:]]
out = []
for extra in (["--runs", "3"], ["--runs", "1", "--profile"]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(common + extra)
    out.append(json.loads(buf.getvalue())[0])
print(json.dumps(out))
"""

# one library and model, N sessions at once: the batched passes' GPU time by role
CODE_NPCS = """
import json, sys, time
from geist import _binding
_binding.load_library(sys.argv[1])
import geist
n, tg = int(sys.argv[3]), int(sys.argv[4])
kw = {}
for a in sys.argv[5:]:
    if a.startswith("--attn-chunk="):
        kw["attn_chunk"] = int(a.split("=", 1)[1])
    elif a == "--attn-per-head":
        kw["attn_per_head"] = True
    elif a == "--fast":
        kw["fast"] = True
    else:
        sys.exit(f"roles.py --npcs: {a} is not an Engine option here")
def batch(profile):
    eng = geist.Engine(backend="vulkan", device_profile=profile, **kw)
    m = geist.Model.load(sys.argv[2], engine=eng)
    ss = [m.session(max_seq_len=64 + tg) for _ in range(n)]
    for h in [s.submit(f"Once upon a time, villager {i} said", max_tokens=1, temperature=0.0)
              for i, s in enumerate(ss)]:
        h.result(600)
    b, p0, t0 = m.device_stats(), m.device_profile(), time.perf_counter()
    hs = [s.submit(" and", max_tokens=tg, temperature=0.0) for s in ss]
    tokens = sum(len(h.result(600).ids) for h in hs)
    wall = time.perf_counter() - t0
    a, p1 = m.device_stats(), m.device_profile()
    passes = max(a["passes"] - b["passes"], 1)
    r = {"npcs": n, "tokens": tokens, "aggregate_tps": tokens / wall,
         "passes": passes, "rows_per_pass": (a["rows"] - b["rows"]) / passes,
         "gpu_ms_per_pass": 1e-6 * (a["gpu_ns"] - b["gpu_ns"]) / passes,
         "dispatches_per_pass": (a["dispatches"] - b["dispatches"]) / passes,
         # the host's part of a pass (session 29): the wall time a pass, and the backend's own
         # phases (the rest is the runtime's: scheduling, sampling, events)
         "wall_ms_per_pass": 1e3 * wall / passes,
         "host_ms_per_pass": {k: 1e-6 * (a[k + "_ns"] - b[k + "_ns"]) / passes
                              for k in ("plan", "record", "wait", "readback")},
         "fast_rows": a["fast_rows"] - b["fast_rows"]}
    if profile:
        r["roles"] = {k: [1e-3 * (p1[k][0] - p0[k][0]) / passes, (p1[k][1] - p0[k][1]) / passes]
                      for k in p1 if p1[k][1] > p0[k][1]}
    for s in ss:
        s.close()
    m.close()
    eng.close()
    return r
# plain first (timestamps around each pass only: the sessions' dispatches overlap as they do in
# a game), then profiled (a timestamp after every dispatch serializes them: the roles), then
# plain again (session 33: a process's first plain run was at times twice as slow)
plain, prof, again = batch(False), batch(True), batch(False)
prof["plain"], prof["plain_again"] = plain, again
print(json.dumps(prof))
"""


def summary(plain: dict[str, Any], profiled: dict[str, Any], tg: int) -> dict[str, Any]:
    """The plain run's tg and GPU ms a token, the profiled run's GPU ms and roles (us a token,
    dispatches a token), from `geist bench --json`'s rows."""
    med, spread = plain[f"tg{tg}_tps"]
    sp, pp = plain.get("device_split", {}), profiled.get("device_split", {})
    return {f"tg{tg}": med, f"tg{tg}_spread": spread,
            "gpu_ms": sp.get("gpu_ms"), "gpu_ms_profiled": pp.get("gpu_ms"),
            "dispatches": sp.get("dispatches_per_token"), "barriers": sp.get("barriers_per_token"),
            "fused_fma": sp.get("fused_fma"),
            "roles": {k: [1e3 * ms, calls] for k, (ms, calls) in pp.get("roles", {}).items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--model", action="append", metavar="NAME=PATH",
                    help="instead of the kit's stand-ins (a local run on lavapipe, say)")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--npcs", type=int, default=0, metavar="N",
                    help="N sessions decoding together, by role a batched pass (not tg128's)")
    a = ap.parse_args()
    models = dict(m.split("=", 1) for m in a.model) if a.model else MODELS
    res: dict[str, Any] = {}
    for spec in a.libs:
        lib, _, extra = spec.partition("@")
        name = Path(lib).stem + (f"@{extra}" if extra else "")
        # a library listed again keeps each run (session 33): name#2, name#3, ...
        base, k = name, 1
        while name in res:
            k += 1
            name = f"{base}#{k}"
        for model, path in models.items():
            args = [x for x in extra.split(",") if x]
            argv = ([CODE_NPCS, lib, path, str(a.npcs), str(a.tg), *args] if a.npcs
                    else [CODE, lib, path, str(a.tg), *args])
            p = subprocess.run([sys.executable, "-c", *argv], capture_output=True, text=True,
                               timeout=300)
            if p.returncode != 0:
                r: dict[str, Any] = {"error": p.stderr[-2000:]}
            else:
                out = json.loads(p.stdout.splitlines()[-1])
                r = out if a.npcs else summary(*out, a.tg)
            shown = ("aggregate_tps", "gpu_ms_per_pass") if a.npcs else (f"tg{a.tg}", "gpu_ms")
            plain = ([r.get(w, {}).get(k) for w in ("plain", "plain_again") for k in shown]
                     if a.npcs else [])
            print(time.strftime("%H:%M:%S"), name, model, *(r.get(k) for k in shown), *plain,
                  r.get("error", "")[:200], flush=True)
            res.setdefault(name, {})[model] = r
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
