"""Greedy ids and a hash of every logits row, per real model, backend and thread count.

Run before and after a refactor that must not change numbers: the two JSON files must be equal.
    .venv/bin/python tests/bench/fingerprint.py OUT.json [--tokens 64] [--models smollm2 gemma3]
The prompts are tests/data/reference/prompts.txt (one per line, "\\n" escapes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import geist
from geist import models

PROMPTS = Path(__file__).resolve().parent.parent / "data" / "reference" / "prompts.txt"


def run(model_name: str, backend: str, threads: int, n_tokens: int) -> dict[str, object]:
    eng = geist.Engine(backend=backend, n_threads=threads)
    model = geist.Model.load(models.get(model_name), engine=eng)
    out: dict[str, object] = {}
    for i, line in enumerate(PROMPTS.read_text().splitlines()):
        prompt = line.replace("\\n", "\n")
        s = model.session(max_seq_len=n_tokens + 64)
        ids = model.tokenize(prompt)
        h = hashlib.sha256()
        greedy: list[int] = []
        s.prefill(ids)
        for _ in range(n_tokens):
            row = s.logits()
            h.update(row.tobytes())
            greedy.append(s.step())
        out[f"prompt{i}"] = {"ids": greedy, "logits_sha256": h.hexdigest()}
        s.close()
    model.close()
    eng.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--backends", nargs="+", default=["cpu_scalar", "cpu_x86"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    a = ap.parse_args()
    res: dict[str, object] = {}
    for m in a.models:
        for b in a.backends:
            for t in a.threads:
                res[f"{m}/{b}/t{t}"] = run(m, b, t, a.tokens)
                print(m, b, t, flush=True)
    Path(a.out).write_text(json.dumps(res, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
