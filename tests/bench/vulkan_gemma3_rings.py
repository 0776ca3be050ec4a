"""The real Gemma 3 on the vulkan device past its sliding window: a prompt longer than the window
(512 on Gemma 3 270M), so the rings of every sliding layer wrap and the prefill's passes stage
their rows, then greedy tokens; the logits of each step against cpu_scalar's, bit for bit. Too
slow for the suite on lavapipe (about 4 minutes there; tests/core/test_vulkan_forward.py runs a
few positions), quick on a real GPU.

    python tests/bench/vulkan_gemma3_rings.py [MODEL.gguf] [--tokens 530] [--steps 2]

Pin the driver with the loader's own variables (VK_DRIVER_FILES). Prints one JSON line; exits 1
when the device departs from cpu_scalar."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import geist
from geist import models


def run(backend: str, path: str, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray,
                                                                        float, int]:
    t0 = time.perf_counter()
    eng = geist.Engine(backend=backend)
    with geist.Model.load(path, engine=eng) as m:
        s = m.session(max_seq_len=len(prompt) + steps + 1, kv_mode="f16")
        s.prefill(prompt)
        rows = [np.asarray(s.logits()).copy()]
        ids = []
        for _ in range(steps):
            ids.append(s.step(None))
            rows.append(np.asarray(s.logits()).copy())
        dev_kv = s.memory()["device_local"]
        s.close()
    eng.close()
    return ids, np.stack(rows), time.perf_counter() - t0, dev_kv


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--tokens", type=int, default=530)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    path = a.model or models.gemma3_path(install=False)
    rng = np.random.default_rng(1)
    prompt = [2] + [int(v) for v in rng.integers(1000, 200000, a.tokens - 1)]
    ref_ids, ref, t_cpu, _ = run("cpu_scalar", path, prompt, a.steps)
    ids, got, t_dev, dev_kv = run("vulkan", path, prompt, a.steps)
    worst = max(float(np.max(np.abs(x - y)) / np.max(np.abs(x))) for x, y in zip(ref, got,
                                                                                 strict=True))
    same = ids == ref_ids and bool(np.array_equal(ref, got))
    print(json.dumps({"model": str(path), "tokens": len(prompt), "steps": a.steps,
                      "ids": ids, "cpu_scalar_ids": ref_ids, "bit_for_bit": same,
                      "worst_relative": worst, "device_kv_bytes": dev_kv,
                      "seconds_cpu_scalar": round(t_cpu, 1), "seconds_vulkan": round(t_dev, 1)}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
