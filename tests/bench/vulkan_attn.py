"""Decode speed of the vulkan backend's attention paths by context length: the exact order (-1:
one workgroup per row and head, cpu_scalar's order) against the split attention with chunks of N
(Engine(attn_chunk=N), docs/VULKAN.md; 0: the device's choice), one JSON line per (attn_chunk,
context).

    python tests/bench/vulkan_attn.py MODEL.gguf [--chunks -1,16,32,64] [--contexts 128,512,2048]
                                      [--tokens 32] [--max-seq-len 4096]

For each context C: a session prefills C - 1 random ids (one pass per 64 rows), then decodes
--tokens steps; the line gives the decode tokens/s (wall), the GPU's own time per token (the
timestamps around each pass: Model.device_stats), dispatches and recordings per token, and the
worst relative logit difference of the decode rows from the first chunk setting's (the others
are fed its greedy ids, so the rows stay comparable; list -1 first: the split's other sum order
against cpu_scalar's). Pin the driver with the loader's own variables (VK_DRIVER_FILES). Speed
means nothing on lavapipe; the H200 is where this is for."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import geist


def _run(m: geist.Model, ctx: int, tokens: int, max_seq: int,
         forced: list[int] | None) -> tuple[dict[str, float], list[int], np.ndarray]:
    """Decode `tokens` steps after a prompt of ctx - 1 ids: greedy, or feeding `forced`."""
    rng = np.random.default_rng(ctx)
    prompt = [int(v) for v in rng.integers(1, int(m.info["n_vocab"]) - 1, ctx - 1)]
    s = m.session(max_seq_len=max_seq, kv_mode="f16")
    s.prefill(prompt)
    s.step(None)  # the first decode pass: recorded, pipelines warm
    before = m.device_stats()
    rows, ids = [], []
    t0 = time.perf_counter()
    for i in range(tokens):
        ids.append(s.step(None if forced is None else forced[i]))
        rows.append(np.asarray(s.logits()).copy())
    wall = time.perf_counter() - t0
    after = m.device_stats()
    s.close()
    d = {k: after[k] - before[k] for k in after}
    timed = max(d["gpu_timed"], 1)
    return ({"tok_s": tokens / wall, "gpu_ms_per_token": d["gpu_ns"] / timed / 1e6,
             "dispatches_per_token": d["dispatches"] / tokens,
             "recorded": d["recorded"]}, ids, np.stack(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--chunks", default="-1,16,32,64")
    ap.add_argument("--contexts", default="128,512,2048")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=4096)
    ns = ap.parse_args()
    chunks = [int(c) for c in ns.chunks.split(",")]
    contexts = [int(c) for c in ns.contexts.split(",")]
    base: dict[int, tuple[list[int], np.ndarray]] = {}
    for chunk in chunks:
        eng = geist.Engine(backend="vulkan", attn_chunk=chunk)
        with geist.Model.load(ns.model, engine=eng) as m:
            for ctx in contexts:
                first = base.get(ctx)
                res, ids, rows = _run(m, ctx, ns.tokens, max(ns.max_seq_len, ctx + ns.tokens + 1),
                                      None if first is None else first[0])
                if first is None:
                    base[ctx] = first = (ids, rows)
                worst = float(max(np.max(np.abs(a - b)) / np.max(np.abs(a))
                                  for a, b in zip(first[1], rows, strict=True)))
                print(json.dumps({"attn_chunk": chunk, "context": ctx, **res,
                                  "worst_rel_vs_first": worst}), flush=True)
        eng.close()


if __name__ == "__main__":
    main()
