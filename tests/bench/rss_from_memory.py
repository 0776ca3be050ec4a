"""Peak memory of the bench's work (one session of 256 positions, prefill 128, decode 64), each side
in a fresh process: geist loading from the game's buffer (the file read into memory: the game's
copy counts), llama.cpp loading the file (mmap; it cannot load from memory). Prints the peak RSS
above the process's RSS before loading (VmHWM after resetting it) and geist's bound
file + KV + 16 MiB (issue 4; tests/test_memory.py asserts it).

    .venv/bin/python tests/bench/rss_from_memory.py            # llama.cpp from install_llama_cpp.sh
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LLAMA_PY = Path.home() / ".cache" / "geist" / "llama-venv" / "bin" / "python"

COMMON = r"""
import sys
import numpy as np
def kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
"""

GEIST = COMMON + r"""
import geist
path = sys.argv[1]
engine = geist.Engine(n_threads=2)
base = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
with open(path, "rb") as f:
    buf = f.read()
model = geist.Model.from_buffer(buf, engine=engine)
rng = np.random.default_rng(0)
with model.session(max_seq_len=256) as s:
    s.prefill([int(x) for x in rng.integers(0, model.n_vocab, 128)])
    for _ in range(64):
        s.step()
    kv = s.memory()["kv_cache"]
print((kib("VmHWM") - base) / 1024, kv / 2**20)
"""

LLAMA = COMMON + r"""
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
        size = path.stat().st_size / 2**20
        out = subprocess.run([sys.executable, "-c", GEIST, str(path)], capture_output=True,
                             text=True, check=True).stdout.split()
        peak, kv = float(out[0]), float(out[1])
        line = (f"{path.name}: geist from memory {peak:.1f} MiB (bound: file {size:.1f} + KV "
                f"{kv:.2f} + 16 = {size + kv + 16:.1f} MiB)")
        if Path(ns.llama_python).exists():
            ll = subprocess.run([ns.llama_python, "-c", LLAMA, str(path)], capture_output=True,
                                text=True, check=True).stdout.split()
            line += f"; llama.cpp from file {float(ll[-1]):.1f} MiB"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
