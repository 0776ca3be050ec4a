"""Peak memory of the bench's work (one session of 256 positions, prefill 128, decode 64), each side
in a fresh process: geist loading from the game's buffer (the file read into memory: the game's
copy counts; the measurement of tests/sessions/test_memory.py, which asserts geist's bound
file + KV + 16 MiB), llama.cpp loading the file (mmap; it cannot load from memory). Prints the
peak RSS above the process's RSS before loading (VmHWM after resetting it).

    .venv/bin/python tests/bench/rss_from_memory.py            # llama.cpp from install_llama_cpp.sh
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LLAMA_PY = Path.home() / ".cache" / "geist" / "llama-venv" / "bin" / "python"

REPO = Path(__file__).resolve().parents[2]

# geist's side is the test's own measurement (tests/sessions/test_memory.py: bench_peak_check),
# run in a fresh interpreter; it prints the peak, the bound and its parts
GEIST = "import sys; sys.path.insert(0, sys.argv[2]); from tests.sessions import test_memory; " \
        "test_memory.bench_peak_check(sys.argv[1])"

LLAMA = r"""
import sys
import numpy as np
def kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
from llama_cpp import Llama
path = sys.argv[1]
base = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
llm = Llama(model_path=path, n_threads=2, n_threads_batch=2, n_ctx=256, n_batch=512, verbose=False)
rng = np.random.default_rng(0)
llm.eval([int(x) for x in rng.integers(10, llm.n_vocab() - 10, 128)])
for t in rng.integers(10, llm.n_vocab() - 10, 64):
    llm.eval([int(t)])
print((kib("VmHWM") - base) / 1024)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--llama-python", default=str(LLAMA_PY))
    ns = ap.parse_args()
    from geist import models

    for name in ns.models:
        path = Path(name) if Path(name).exists() else models.get(name)
        out = subprocess.run([sys.executable, "-c", GEIST, str(path), str(REPO)],
                             capture_output=True, text=True, check=True).stdout.strip()
        line = f"{path.name}: geist from memory: {out}"
        if Path(ns.llama_python).exists():
            ll = subprocess.run([ns.llama_python, "-c", LLAMA, str(path)], capture_output=True,
                                text=True, check=True).stdout.split()
            line += f"; llama.cpp from file {float(ll[-1]):.1f} MiB"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
