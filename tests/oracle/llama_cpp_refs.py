"""llama.cpp as the oracle on synthesized fixtures: writes tests/data/llama_cpp/<fixture>.json.

For each fixture (``family:weight_type[:seed]``, a geist.testing.FAMILIES variant) this builds the
GGUF with geist.testing, loads it in llama.cpp (llama-cpp-python 0.3.36, in its own venv: see
tests/bench/install_llama_cpp.sh) and records

* the tokenization of TEXTS (the model's default BOS/EOS, no special-token parsing);
* the logits of every position of one 32-token sequence (random ids, seed 7), stored as
  float16 (base64), and the fixture file's sha256 so a test can tell when the builder changed.

tests/oracle/test_llama_cpp_refs.py compares geist against these files without llama.cpp.

Usage (from the repository root, geist's venv; llama.cpp runs in a subprocess of the other)::

    .venv/bin/python tests/oracle/llama_cpp_refs.py [--llama-python PATH] [FIXTURE ...]

With no FIXTURE the DEFAULT_FIXTURES are written. --llama-python defaults to
~/.cache/geist/llama-venv/bin/python (what install_llama_cpp.sh makes); any Python where
``import llama_cpp`` gives 0.3.36 works (a prebuilt libllama through LLAMA_CPP_LIB_PATH, too).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "llama_cpp"
N_POS = 32
IDS_SEED = 7
FIXTURE_SEED = 21
LLAMA_CPP_VERSION = "0.3.36"

TEXTS = [
    "Hello world",
    "the dragon and the knight went to the tower",
    " leading space, numbers 12345 and 2024-06-01; punctuation!? (yes)",
    "Ünïcödé: naïve café, 日本語, emoji 🐉",
    "line\nbreaks\n\n  two spaces\ttab",
    "don't we'll I'M you've",
]

# family:type, every architecture at one float and two quantized types (the quant helper's
# fixtures, e.g. "llama:Q5_K", are added to this list by name)
DEFAULT_FIXTURES = [
    f"{fam}:{t}"
    for fam in ("llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")
    for t in ("F32", "Q8_0", "Q4_K")
] + [f"llama:{t}" for t in ("Q5_K", "Q3_K", "Q2_K", "Q5_1", "IQ4_NL", "IQ4_XS", "BF16")]


def parse_fixture(spec: str) -> tuple[str, str, int]:
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"fixture {spec!r}: expected family:weight_type[:seed]")
    return parts[0], parts[1], int(parts[2]) if len(parts) == 3 else FIXTURE_SEED


def data_name(family: str, weight_type: str, seed: int) -> str:
    return f"{family}-{weight_type}" + ("" if seed == FIXTURE_SEED else f"-s{seed}")


def sequence_ids(n_vocab: int) -> list[int]:
    import numpy as np

    return [int(i) for i in np.random.default_rng(IDS_SEED).integers(0, n_vocab, N_POS)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the worker: runs under the llama.cpp venv's Python ---------------------------------------

WORKER = r"""
import base64, json, sys
import numpy as np
import llama_cpp
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    # F32 KV cache and no flash attention: llama.cpp's plain arithmetic (its default F16 cache
    # alone moves logits by ~1e-3)
    llm = llama_cpp.Llama(model_path=job["path"], n_ctx=64, n_batch=64, n_ubatch=64,
                          n_threads=1, logits_all=True, verbose=False, type_k=0, type_v=0,
                          flash_attn=False)
    toks = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=False) for t in job["texts"]]
    llm.reset()
    llm.eval(job["ids"])
    logits = np.asarray(llm.scores[: len(job["ids"])], dtype=np.float32)
    out.append({"tokens": toks, "n_vocab": llm.n_vocab(),
                "logits_f16": base64.b64encode(logits.astype(np.float16).tobytes()).decode(),
                "finite": bool(np.isfinite(logits).all()),
                "version": llama_cpp.__version__})
    del llm
json.dump(out, sys.stdout)
"""


def run_llama_cpp(llama_python: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    res = subprocess.run([llama_python, "-c", WORKER], input=json.dumps(jobs), text=True,
                         capture_output=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"llama.cpp worker failed ({res.returncode}):\n{res.stderr[-4000:]}")
    out: list[dict[str, Any]] = json.loads(res.stdout)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("fixtures", nargs="*", help="family:weight_type[:seed]")
    ap.add_argument("--llama-python",
                    default=str(Path.home() / ".cache/geist/llama-venv/bin/python"))
    ap.add_argument("--out", default=str(DATA))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "python"))
    from geist import testing

    specs = args.fixtures or DEFAULT_FIXTURES
    jobs, metas = [], []
    for spec in specs:
        family, wtype, seed = parse_fixture(spec)
        path = testing.family_fixture_path(family, wtype, seed)
        n_vocab = testing.default_sizes(testing.FAMILIES[family][0]).n_vocab
        ids = sequence_ids(n_vocab)
        jobs.append({"path": str(path), "texts": TEXTS, "ids": ids})
        metas.append({"family": family, "weight_type": wtype, "seed": seed, "ids": ids,
                      "fixture_sha256": sha256(path), "texts": TEXTS})
    results = run_llama_cpp(args.llama_python, jobs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for meta, res in zip(metas, results, strict=True):
        if res["version"] != LLAMA_CPP_VERSION:
            raise RuntimeError(f"llama_cpp {res['version']}, expected {LLAMA_CPP_VERSION}")
        if not res["finite"]:
            raise RuntimeError(f"{meta['family']}:{meta['weight_type']}: non-finite logits")
        doc = meta | {"llama_cpp": res["version"], "n_vocab": res["n_vocab"],
                      "tokens": res["tokens"], "logits_f16": res["logits_f16"]}
        name = data_name(meta["family"], meta["weight_type"], meta["seed"])
        (out / f"{name}.json").write_text(json.dumps(doc, indent=None) + "\n")
        print(f"{name}: {len(base64.b64decode(res['logits_f16']))} bytes of logits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
