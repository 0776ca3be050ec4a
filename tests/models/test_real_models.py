"""The real models against llama.cpp's outputs (tests/data/reference): teacher forcing and greedy.

llama.cpp computes matrix products with 8-bit-quantized activations and geist (cpu_scalar) with
float activations, so logits differ slightly; the criteria below are the issue's: top-1 agreement
where llama.cpp is confident (margin > 0.5) and top-1 inside llama.cpp's top-5 everywhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import geist
from tests.reference_data import reference_json

pytestmark = pytest.mark.slow

MODELS = ["smollm2", "gemma3"]


def agreement(model: geist.Model, ref: dict) -> tuple[float, float, int, int]:
    confident_hits = confident = top5_hits = total = 0
    for prompt in ref["prompts"]:
        ids = prompt["prompt_ids"] + prompt["greedy_ids"]
        with model.session(max_seq_len=len(ids)) as s:
            logits = s.eval(ids)
        for i, topk in enumerate(prompt["topk_per_position"]):
            ours = int(np.argmax(logits[i]))
            total += 1
            top5_hits += ours in [t[0] for t in topk[:5]]
            if topk[0][1] - topk[1][1] > 0.5:
                confident += 1
                confident_hits += ours == topk[0][0]
    return confident_hits / confident, top5_hits / total, confident, total


@pytest.mark.parametrize("name", MODELS)
def test_teacher_forcing_agrees_with_llama_cpp(name: str) -> None:
    from geist import models

    ref = reference_json(name)
    with geist.Model.load(models.get(name), backend="cpu_scalar") as model:
        top1, top5, confident, total = agreement(model, ref)
    print(
        f"{name}: top-1 agreement {top1:.4f} over {confident} confident positions, "
        f"top-1 in llama.cpp top-5 {top5:.4f} over {total}"
    )
    assert top1 >= 0.97
    assert top5 >= 0.99


@pytest.mark.parametrize("name", MODELS)
def test_greedy_decode_reproduces_llama_cpp(name: str) -> None:
    """Free-running greedy decode follows llama.cpp's token for token until a near-tie.

    Where llama.cpp's top two logits lie within 0.5 of each other, the order of float roundings
    (ours and llama.cpp's differ: activation quantization, exp, sums) decides the pick, and a
    decode that takes the other branch is not wrong; at such a position our pick must be among
    llama.cpp's top 5. Anywhere llama.cpp is confident we must pick its token. (A count of whole
    matching prompts, used before, flipped with 1e-7 changes to exp: gemma3's prompt 6 sits at a
    0.45 margin at its 8th token.)
    """
    from geist import models

    ref = reference_json(name)
    n_steps, followed, near_ties = 16, 0, 0
    with geist.Model.load(models.get(name), backend="cpu_scalar") as model:
        for prompt in ref["prompts"]:
            # llama.cpp ran with its default F16 KV cache; so do we here
            with model.session(max_seq_len=64, kv_mode="f16") as s:
                s.prefill(prompt["prompt_ids"])
                out = [s.step() for _ in range(n_steps)]
            want = prompt["greedy_ids"][:n_steps]
            k = next((i for i in range(n_steps) if out[i] != want[i]), n_steps)
            followed += k
            if k == n_steps:
                continue
            topk = prompt["topk_per_position"][len(prompt["prompt_ids"]) - 1 + k]
            margin = topk[0][1] - topk[1][1]
            assert margin < 0.5, f"{prompt['text']!r}: step {k} left llama.cpp's confident pick"
            assert out[k] in [t[0] for t in topk[:5]], f"{prompt['text']!r}: step {k}"
            near_ties += 1
    total = n_steps * len(ref["prompts"])
    print(
        f"{name}: greedy decode followed llama.cpp for {followed}/{total} tokens; "
        f"{near_ties} prompts parted at a near-tie"
    )
    assert followed >= total // 2


def test_model_path_helper_finds_files() -> None:
    from geist import models

    for name in MODELS:
        p = Path(models.get(name))
        assert p.is_file() and p.stat().st_size > 50_000_000
