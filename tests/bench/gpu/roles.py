"""Where a decode token's GPU time goes, for several geist libraries in one device call (session
18): for each library and model, `geist bench --backend vulkan --runs 3 --pp 16 --tg 128` (the
GPU time by timestamps around each pass, tg128) and the same with `--profile` (the GPU time by
role, a timestamp after every dispatch), each library in its own process, read from
`geist bench --json` (not its printed table).

    python3 .dev-gpu/roles.py OUT.json LIB.so[@ARG,ARG...] [...] [--model NAME=PATH ...] [--tg N]

A library's @ARGs go to its `geist bench` runs (`lib.so@--attn-chunk=16`: its chunk size; the
result's name then carries them: `lib@--attn-chunk=16`).

Run from the checkout root there, with the kit's environment (as ab.py); models: the stand-ins
setup made. The libraries are typically stubs.py's: a kernel with one part left out, whose
results are wrong and whose time says what that part costs.
"""
import argparse
import json
import subprocess
import sys
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
    a = ap.parse_args()
    models = dict(m.split("=", 1) for m in a.model) if a.model else MODELS
    res: dict[str, Any] = {}
    for spec in a.libs:
        lib, _, extra = spec.partition("@")
        name = Path(lib).stem + (f"@{extra}" if extra else "")
        for model, path in models.items():
            p = subprocess.run([sys.executable, "-c", CODE, lib, path, str(a.tg),
                                *(x for x in extra.split(",") if x)],
                               capture_output=True, text=True, timeout=300)
            r = (summary(*json.loads(p.stdout.splitlines()[-1]), a.tg) if p.returncode == 0
                 else {"error": p.stderr[-2000:]})
            res.setdefault(name, {})[model] = r
            print(name, model, r.get(f"tg{a.tg}"), r.get("gpu_ms"), r.get("error", "")[:200],
                  flush=True)
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
