"""llama.cpp's outputs for the two real models, kept in the repository under
tests/data/reference/ (`tokenize`: the ids of each corpus line; `prompts`: prompt ids, greedy
ids, top-k logits).

They are part of the checkout: a missing file is a test failure, never a skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REFERENCE_DIR = Path(__file__).resolve().parent / "data" / "reference"


def reference_json(name: str) -> dict[str, Any]:
    """llama.cpp's outputs for a real model ("smollm2" or "gemma3")."""
    files = {
        "smollm2": "SmolLM2-135M-Instruct.Q4_1.json",
        "gemma3": "gemma-3-270m-q4_k_m.json",
    }
    path = REFERENCE_DIR / files[name]
    data: dict[str, Any] = json.loads(path.read_text())
    return data
