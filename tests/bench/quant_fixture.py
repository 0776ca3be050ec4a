"""Prints the path of a benchmark-size random-weight fixture of one weight type or mix, built
once into geist.testing's cache folder, for `geist bench` and llama.cpp's llama-bench on the same
file:

    F=$(.venv/bin/python tests/bench/quant_fixture.py Q5_K_M)
    .venv/bin/python -m geist bench "$F" --runs 3 --pp 128 --tg 64 --threads 2
    ~/.cache/geist/llama-tools/build/bin/llama-bench -m "$F" -t 2 -p 128 -n 64 -r 3

TYPE: a geist.testing weight type (Q5_K, Q3_K, IQ4_XS, ...) or Q5_K_M (testing.Q5_K_M_TYPES,
token_embd and output as that mix gives them). The geometry is SmolLM2-135M-like but with rows
of a multiple of 256 (d_model 768, 12 layers, 12 heads over 4 KV heads, d_ff 2048), ~75 M
parameters; the vocabulary stays the fixtures' 301 tokens, so the output matrix is small.
"""

from __future__ import annotations

import sys

from geist import testing

SIZES = {"d_model": 768, "n_layer": 12, "n_head": 12, "n_head_kv": 4, "head_dim": 64,
         "d_ff": 2048, "n_ctx": 1024}  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    kind = argv[0]
    if kind == "Q5_K_M":
        path = testing.fixture_path("llama", "Q5_K", seed=21,
                                    type_overrides=testing.Q5_K_M_TYPES, **SIZES)
    else:
        path = testing.fixture_path("llama", kind, seed=21, **SIZES)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
