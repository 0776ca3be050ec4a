"""Where a 512-token prefill's time goes on the device (session 15): pp512 of each run (the first
after a load apart: it grows the scratch), passes, dispatches and barriers, the GPU's time a pass,
then the same with the profiling engine, by role.

    python3 .dev-gpu/prefill.py [LIBGEIST_SO]

Run from the checkout root there, with the kit's environment (as ab.py); LIBGEIST_SO: another
library than the kit's (an A/B: one process per library). Models: the stand-ins setup made.
"""
import sys
import time

import numpy as np

if len(sys.argv) > 1:
    from geist import _binding

    _binding.load_library(sys.argv[1])
import geist

MODELS = {"smollm2": "/opt/gpukit/models/smollm2.gguf", "gemma3": "/opt/gpukit/models/gemma3.gguf"}
REPS = 4


def main() -> None:
    ids = [int(v) for v in np.random.default_rng(1).integers(100, 1000, 512)]
    for name, path in MODELS.items():
        for prof in (False, True):
            eng = geist.Engine(backend="vulkan", device_profile=prof)
            with geist.Model.load(path, engine=eng) as m:
                times = []
                for _ in range(REPS):
                    with m.session(max_seq_len=640) as s:
                        t = time.perf_counter()
                        s.prefill(ids)
                        times.append(time.perf_counter() - t)
                st = m.device_stats()
                print(name, "profiled" if prof else "plain", "pp512 t/s",
                      [round(512 / x) for x in times], "passes", st["passes"], "dispatches",
                      st["dispatches"], "barriers", st["barriers"], "GPU ms a pass",
                      round(st["gpu_ns"] / max(1, st["gpu_timed"]) / 1e6, 3), flush=True)
                if prof:
                    roles = m.device_profile()
                    total = sum(ns for ns, _ in roles.values()) or 1
                    for role, (ns, calls) in sorted(roles.items(), key=lambda kv: -kv[1][0]):
                        if calls:
                            print(f"  {role:12s} {ns / REPS / 1e6:8.3f} ms a prefill "
                                  f"{calls / REPS:6.0f} dispatches {100 * ns / total:5.1f} %")
            eng.close()


if __name__ == "__main__":
    main()
