"""Tokenizer throughput on the two real models: MB/s for about 1 MB of mixed text.

Run: .venv/bin/python tests/bench/bench_tokenize.py [--mb 1] [--repeat 3] [--lib PATH]

The text is the reference corpus (prose, contractions, numbers, accents, CJK, emoji, code, html,
URLs, whitespace runs) repeated to the size asked; the figure is the best of --repeat runs of
one geist_tokenize call (tokenize), one geist_detokenize call (detokenize) and the streaming
detokenizer fed id by id (stream). Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import geist
from geist import models
from geist._binding import load_library
from geist.text import StreamDetokenizer

CORPUS = Path(__file__).resolve().parents[1] / "data" / "reference" / "corpus.txt"


def mixed_text(n_bytes: int) -> str:
    base = CORPUS.read_text(encoding="utf-8")
    base = base.replace("\\t", "\t").replace("\\n", "\n")
    text = base * (n_bytes // len(base.encode()) + 1)
    return text.encode()[:n_bytes].decode("utf-8", "ignore")


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_model(name: str, text: str, repeat: int) -> None:
    n_bytes = len(text.encode())
    with geist.Model.load(models.get(name)) as model:
        ids = model.tokenize(text, add_special=False)
        t_tok = best_of(repeat, lambda: model.tokenize(text, add_special=False))
        t_detok = best_of(repeat, lambda: model.detokenize(ids))

        def stream() -> None:
            d = StreamDetokenizer(model._ptr)
            for t in ids:
                d.push(t)
            d.flush()

        t_stream = best_of(1, stream)
        mb = n_bytes / 1e6
        print(f"{name:8s} tokenize {mb / t_tok:7.2f} MB/s ({t_tok * 1e3:6.1f} ms, "
              f"{len(ids)} ids)  detokenize {mb / t_detok:7.2f} MB/s  "
              f"stream {len(ids) / t_stream / 1e3:6.1f} k ids/s (Python loop)  "
              f"tables {model.memory()['tokenizer'] / 2**20:.2f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=float, default=1.0, help="text size in MB (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    ap.add_argument("--lib", default=None, help="libgeist.so to use (default: the installed one)")
    args = ap.parse_args()
    load_library(args.lib)
    text = mixed_text(int(args.mb * 1_000_000))
    print(f"text: {len(text.encode())} bytes of mixed text")
    for name in models.MODEL_NAMES:
        bench_model(name, text, args.repeat)


if __name__ == "__main__":
    main()
