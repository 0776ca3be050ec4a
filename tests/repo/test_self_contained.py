"""The checkout needs nothing beside it: no test, helper, script or package module reaches outside
the repository (e.g. into a sibling folder of data); the data the tests read is committed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.reference_data import REFERENCE_DIR

REPO = Path(__file__).resolve().parents[2]
TREES = ["tests", "python", "scripts", "docs"]
SUFFIXES = {".py", ".sh", ".gd", ".c", ".h", ".toml", ".cfg", ".md", ".txt"}
# written here in pieces, so this file does not match itself
OUTSIDE = [
    re.compile(re.escape("../" + "shared")),
    re.compile(r"parents?(\[\d+\])?\s*/\s*[\"']" + "shared" + r"[\"']"),
    re.compile(r"[\"']\.\.[\"']\s*[,/]\s*[\"']" + "shared"),
]


def _files() -> list[Path]:
    out = []
    for tree in TREES:
        for p in sorted((REPO / tree).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts \
                    and not p.relative_to(REPO).parts[:2] == ("tests", "data"):
                out.append(p)
    return [*out, REPO / "README.md", REPO / "pyproject.toml"]


def test_no_path_reaches_outside_the_checkout() -> None:
    files = _files()
    assert files
    found = []
    for p in files:
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if any(rx.search(line) for rx in OUTSIDE):
                found.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "paths outside the checkout:\n" + "\n".join(found)


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct.Q4_1.json", "gemma-3-270m-q4_k_m.json",
                                  "corpus.txt", "prompts.txt"])
def test_reference_data_is_in_the_repository(name: str) -> None:
    path = REFERENCE_DIR / name
    assert path.is_file() and path.stat().st_size > 0, f"{path} missing: it is part of the repo"
    assert REPO in path.resolve().parents
