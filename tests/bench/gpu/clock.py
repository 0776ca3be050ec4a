"""Where a workgroup's time goes inside the decode kernels (session 20): the in-kernel clock
build (`scons gpu_clock=1` -> build/gpuclock-release/libgeist.so; shaders/clock.glsl,
native/src/backend/vulkan/vk_clock.c) runs `geist bench --backend vulkan --runs 1 --pp 16 --tg N`
on each model, and its table (printed to stderr at the model's teardown; decode passes only) is
read into JSON: per kernel and mark, the records, the mean SM cycles and device-clock ticks (ns on
NVIDIA) since the workgroup's start, and the mean cycles since its previous mark (that step's own
cost); then each step in microseconds (the SM clock's rate from the device clock's ticks).

    python3 .dev-gpu/clock.py OUT.json CLOCK.so [--model NAME=PATH ...] [--tg N] [--fast]
                              [--npcs N]

With --npcs N (session 32) the decode passes are N sessions' together (`geist bench --npcs N`):
the kernels of batched passes, a fast product's blocks of rows among them.

Run there with the kit's environment (as roles.py); here with --model on lavapipe (whose clocks
are the CPU's: only a check that the instrument works). The clock build's kernels compute what
the product's do, bit for bit (tests/core/test_vulkan_forward.py), with a record write at each
mark: the figures are of the instrumented kernels, a little slower than the product's.
"""
import argparse
import json
import re
import subprocess
import sys
from typing import Any

MODELS = {"gemma3": "/opt/gpukit/models/gemma3.gguf", "smollm2": "/opt/gpukit/models/smollm2.gguf"}
CODE = """
import contextlib, io, sys
from geist import _binding
_binding.load_library(sys.argv[1])
from geist.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["bench", sys.argv[2], "--backend", "vulkan", "--pp", "16", "--tg", sys.argv[3],
          "--runs", "1"] + sys.argv[4:])
"""
LINE = re.compile(r"geist clock: 0x([0-9a-f]{2,3}) (.{20}) (.{24}) n +(\d+) +cycles +([\d.]+) +"
                  r"ticks +([\d.]+) +step +([\d.]+)")


def parse(stderr: str) -> list[dict[str, Any]]:
    rows = []
    for ln in stderr.splitlines():
        m = LINE.match(ln)
        if m:
            rows.append({"id": int(m[1], 16), "kernel": m[2].strip(), "mark": m[3].strip(),
                         "n": int(m[4]), "cycles": float(m[5]), "ticks": float(m[6]),
                         "step_cycles": float(m[7])})
    return rows


def segments(marks: list[dict[str, Any]]) -> tuple[float, list[str]]:
    """The SM clock's ns a cycle (the device clock's ticks over the cycles of the marks furthest
    from their workgroup's start: ns on NVIDIA; 1 on lavapipe, whose clocks are the CPU's), and a
    line per mark with its step's mean in microseconds: what each step of a chain costs."""
    far = sorted(marks, key=lambda m: m["cycles"], reverse=True)[:8]
    cyc = sum(m["cycles"] * m["n"] for m in far)
    ns = sum(m["ticks"] * m["n"] for m in far) / cyc if cyc else 0.0
    lines = [f"  {m['kernel']:<20} {m['mark']:<24} step {m['step_cycles'] * ns / 1e3:8.3f} us  "
             f"(from the start {m['cycles'] * ns / 1e3:8.3f} us, n {m['n']})" for m in marks]
    return ns, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("lib")
    ap.add_argument("--model", action="append", metavar="NAME=PATH",
                    help="instead of the kit's stand-ins (a local run on lavapipe, say)")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--fast", action="store_true",
                    help="geist bench --fast: the fast products, attention and norms (session 28)")
    ap.add_argument("--npcs", type=int, default=0,
                    help="N sessions decoding together (geist bench --npcs N; session 32)")
    a = ap.parse_args()
    models = dict(m.split("=", 1) for m in a.model) if a.model else MODELS
    res: dict[str, Any] = {}
    for name, path in models.items():
        try:
            cmd = [sys.executable, "-c", CODE, a.lib, path, str(a.tg)]
            cmd += ["--fast"] if a.fast else []
            cmd += ["--npcs", str(a.npcs)] if a.npcs else []
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
        except subprocess.TimeoutExpired:
            res[name] = {"rc": "timeout after 280 s"}
            print(f"== {name}: timeout after 280 s")
            with open(a.out, "w", encoding="utf-8") as f:
                json.dump(res, f, indent=1)
            continue
        head = [ln for ln in r.stderr.splitlines() if ln.startswith("geist clock:")][:1]
        res[name] = {"rc": r.returncode, "summary": head[0] if head else None,
                     "marks": parse(r.stderr)}
        if r.returncode != 0:
            res[name]["stderr_tail"] = r.stderr[-3000:]
        print(f"== {name} (rc {r.returncode})")
        for ln in r.stderr.splitlines():
            if ln.startswith("geist clock:"):
                print(ln)
        if res[name]["marks"]:
            ns, lines = segments(res[name]["marks"])
            res[name]["ns_per_cycle"] = ns
            print(f"== {name}: each mark's step in microseconds ({ns:.4f} ns a cycle)")
            print("\n".join(lines))
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
