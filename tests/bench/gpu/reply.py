"""Where an NPC reply's time goes on the device (session 13): a 128-token persona as a shared
prefix, a 16-token line per reply (a new session each), 8 replies, the last 6's medians of the
model's device counters (`Model.device_stats()`: plan, record, wait, readback, GPU time of the
reply's two passes), then the same with `device_profile=True` (the GPU time by role).

    python3 .dev-gpu/reply.py OUT.json

Environment and models as ab.py's.
"""
import json
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, ".dev-gpu")
import geist


def main() -> None:
    out: dict[str, Any] = {}
    for name in ("smollm2", "gemma3"):
        for prof in (False, True):
            eng = geist.Engine(backend="vulkan", device_profile=prof)
            m = geist.Model.load(f"/opt/gpukit/models/{name}.gguf", engine=eng)
            rng = np.random.default_rng(1)
            persona = m.prefix([int(x) for x in rng.integers(100, m.n_vocab - 100, 128)])
            rows: list[dict[str, Any]] = []
            for _ in range(8):
                line = [int(x) for x in rng.integers(100, m.n_vocab - 100, 16)]
                with m.session(max_seq_len=192, prefix=persona) as s:
                    b, p0 = m.device_stats(), m.device_profile()
                    t0 = time.perf_counter()
                    res = s.submit(line, max_tokens=1, temperature=0.0).result(60)
                    t1 = time.perf_counter()
                    a, p1 = m.device_stats(), m.device_profile()
                d: dict[str, Any] = {k: a[k] - b[k] for k in a}
                d["first_token_ms"] = 1000 * (res.first_token_s or 0)
                d["request_ms"] = 1000 * (t1 - t0)
                if prof:
                    d["roles_us"] = {k: round((p1[k][0] - p0[k][0]) / 1000, 1) for k in p1
                                     if p1[k][1] - p0[k][1]}
                rows.append(d)
            persona.close()
            m.close()
            eng.close()
            keep = rows[2:]
            med = {k: float(np.median([x[k] for x in keep])) for k in keep[0] if k != "roles_us"}
            key = f"{name}/{'prof' if prof else 'plain'}"
            out[key] = {"median": med, "last": rows[-1]}
            shown = {k: round(v / 1000, 1) if k.endswith("_ns") else v for k, v in med.items()}
            print(key, json.dumps(shown), flush=True)
            if prof:
                print("  roles (us, last reply):", rows[-1]["roles_us"], flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
