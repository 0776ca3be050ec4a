"""A/B of two geist libraries on the device (session 13): bench.py's `geist_matched`
(llama-bench's and llama-batched-bench's protocols, the reply) with each library in its own
process, alternating, ROUNDS times per model.

    python3 .dev-gpu/ab.py OLD_LIBGEIST_SO NEW_LIBGEIST_SO OUT.json [ROUNDS]

Run from the checkout root there, with the kit's environment (`device.sh`'s GEIST_LD as
LD_LIBRARY_PATH, PYTHONPATH=.dev-gpu/python:/opt/gpukit/site); models: the stand-ins setup made.
"""
import json
import subprocess
import sys
from typing import Any

MODELS = {"smollm2": "/opt/gpukit/models/smollm2.gguf", "gemma3": "/opt/gpukit/models/gemma3.gguf"}
CODE = """
import json, sys
sys.path.insert(0, '.dev-gpu')
from geist import _binding
_binding.load_library(sys.argv[1])
import bench
print(json.dumps(bench.geist_matched(sys.argv[2], 5, {'matched', 'npcs', 'reply'})))
"""


def main() -> None:
    libs = {"old": sys.argv[1], "new": sys.argv[2]}
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    out: dict[str, Any] = {}
    for rnd in range(rounds):
        for model, path in MODELS.items():
            for name, lib in libs.items():
                p = subprocess.run([sys.executable, "-c", CODE, lib, path], capture_output=True,
                                   text=True, timeout=200)
                try:
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    r = {"error": p.stderr[-2000:]}
                key = f"{model}/{name}/{rnd}"
                out[key] = r
                short = {k: v["median"] if isinstance(v, dict) and "median" in v else v
                         for k, v in r.items() if k != "device"}
                print(key, json.dumps(short), flush=True)
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
