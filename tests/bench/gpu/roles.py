"""Where a decode token's GPU time goes, for several geist libraries in one device call (session
18): for each library and model, `geist bench --backend vulkan --runs 3 --pp 16 --tg 128` (the
GPU time by timestamps around each pass, tg128) and the same with `--profile` (the GPU time by
role, a timestamp after every dispatch), each library in its own process.

    python3 .dev-gpu/roles.py OUT.json LIB.so [LIB.so ...]

Run from the checkout root there, with the kit's environment (as ab.py); models: the stand-ins
setup made. The libraries are typically stubs.py's: a kernel with one part left out, whose
results are wrong and whose time says what that part costs.
"""
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MODELS = {"gemma3": "/opt/gpukit/models/gemma3.gguf", "smollm2": "/opt/gpukit/models/smollm2.gguf"}
CODE = """
import sys
from geist import _binding
_binding.load_library(sys.argv[1])
from geist.cli import main
common = ["bench", sys.argv[2], "--backend", "vulkan", "--pp", "16", "--tg", "128"]
main(common + ["--runs", "3"])
main(common + ["--runs", "1", "--profile"])
"""


def parse(text: str) -> dict[str, Any]:
    """The plain run's tg128 and GPU ms a token, the profiled run's GPU ms and roles (us a token,
    dispatches a token)."""
    out: dict[str, Any] = {"roles": {}}
    for line in text.splitlines():
        m = re.match(r"\S+\.gguf\s+vulkan\s+\S+\s+\S+\s+([\d.]+)±([\d.]+)", line)
        if m and "tg128" not in out:
            out["tg128"], out["tg128_spread"] = float(m.group(1)), float(m.group(2))
        m = re.search(r"GPU ([\d.]+) by timestamps", line)
        if m:
            out["gpu_ms" if "gpu_ms" not in out else "gpu_ms_profiled"] = float(m.group(1))
        m = re.match(r"\s+(\d+) dispatches, (\d+) barriers per token", line)
        if m:
            out["dispatches"], out["barriers"] = int(m.group(1)), int(m.group(2))
        m = re.match(r"\s{4}(\w+)\s+([\d.]+) us\s+([\d.]+) dispatches", line)
        if m:
            out["roles"][m.group(1)] = [float(m.group(2)), float(m.group(3))]
    return out


def main() -> None:
    res: dict[str, Any] = {}
    for lib in sys.argv[2:]:
        name = Path(lib).stem
        for model, path in MODELS.items():
            p = subprocess.run([sys.executable, "-c", CODE, lib, path], capture_output=True,
                               text=True, timeout=300)
            r = parse(p.stdout) if p.returncode == 0 else {"error": p.stderr[-2000:]}
            res.setdefault(name, {})[model] = r
            print(name, model, r.get("tg128"), r.get("gpu_ms"), r.get("error", "")[:200],
                  flush=True)
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
