"""Same-geometry stand-ins for real GGUF files, for speed measurements where the real file cannot
travel (the device machine's calls carry 64 MiB; SmolLM2 Q4_1 is 98 MB, Gemma 3 Q4_K_M 253 MB).

Speed does not depend on weight values, so a stand-in keeps everything that does: the real
file's header byte for byte (metadata, tokenizer, tensor infos: names, shapes, types, offsets,
alignment) and a data section of the same size in which every tensor holds valid blocks of its
own type with sane f16 scales (weights of a few hundredths, norm weights near 1) from a seeded
generator. The result has the real file's size and header; only the weight values differ.

    python standin.py header REAL.gguf OUT_PREFIX    # here: OUT_PREFIX.head.gz + .json (gguf pkg)
    python standin.py make OUT_PREFIX.json OUT.gguf  # there: numpy only
    python standin.py check OUT_PREFIX.json OUT.gguf # size and header equal the real file's
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# ggml block layouts: (values per block, bytes per block, [(byte offset of an f16 field, kind)])
# kind: "d" the block scale, "m" Q4_1/Q5_1's minimum (-8 d / -16 d: values centre on 0),
# "dmin" Q4_K's minimum scale. Offsets as in ggml's block_* structs.
BLOCKS: dict[str, tuple[int, int, list[tuple[int, str]]]] = {
    "Q8_0": (32, 34, [(0, "d")]),
    "Q4_0": (32, 18, [(0, "d")]),
    "Q4_1": (32, 20, [(0, "d"), (2, "m")]),
    "Q5_0": (32, 22, [(0, "d")]),
    "Q5_1": (32, 24, [(0, "d"), (2, "m")]),
    "Q4_K": (256, 144, [(0, "d"), (2, "dmin")]),
    "Q5_K": (256, 176, [(0, "d"), (2, "dmin")]),
    "Q6_K": (256, 210, [(208, "d")]),
}
# the block scale that gives weights of a few hundredths with random codes of each type
SCALE = {"Q8_0": 3e-4, "Q4_0": 4e-3, "Q4_1": 4e-3, "Q5_0": 2e-3, "Q5_1": 2e-3,
         "Q4_K": 2e-4, "Q5_K": 1e-4, "Q6_K": 3e-5}


def header(real: Path, prefix: Path) -> None:
    from gguf import GGUFReader  # the development machine has it; the device side needs numpy

    r = GGUFReader(str(real))
    raw = real.read_bytes()[: r.data_offset]
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
                "offset": int(t.data_offset), "n_bytes": int(t.n_bytes)} for t in r.tensors]
    for t in tensors:
        if t["type"] not in BLOCKS and t["type"] not in ("F32", "F16"):
            raise SystemExit(f"{real.name}: tensor {t['name']} has type {t['type']}, which this "
                             "generator has no block layout for")
    meta = {"file": real.name, "size": real.stat().st_size, "data_offset": r.data_offset,
            "header_sha256": hashlib.sha256(raw).hexdigest(),
            "file_sha256": hashlib.sha256(real.read_bytes()).hexdigest(), "tensors": tensors}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(f"{prefix}.head.gz", "wb", compresslevel=9) as f:
        f.write(raw)
    Path(f"{prefix}.json").write_text(json.dumps(meta, indent=1))


def _tensor_bytes(t: dict[str, Any], rng: np.random.Generator) -> bytes:
    typ, n = t["type"], t["n_bytes"]
    if typ in ("F32", "F16"):
        count = n // (4 if typ == "F32" else 2)
        if t["name"].endswith("norm.weight"):
            vals = 1.0 + 0.02 * rng.standard_normal(count)
        else:
            vals = 0.02 * rng.standard_normal(count)
        return vals.astype(np.float32 if typ == "F32" else np.float16).tobytes()
    _, bsize, fields = BLOCKS[typ]
    nblk = n // bsize
    if nblk * bsize != n:
        raise ValueError(f"{t['name']}: {n} bytes is not a whole number of {typ} blocks")
    blk = rng.integers(0, 256, size=(nblk, bsize), dtype=np.uint8)
    d = (SCALE[typ] * rng.uniform(0.5, 1.5, nblk)).astype(np.float16)
    for off, kind in fields:
        mid = 16.0 if typ == "Q5_1" else 8.0  # the code's midpoint
        v = {"d": d, "m": (-mid * d.astype(np.float32)).astype(np.float16),
             "dmin": (8.0 * d.astype(np.float32)).astype(np.float16)}[kind]
        blk[:, off:off + 2] = v.view(np.uint8).reshape(nblk, 2)
    return blk.tobytes()


def make(meta_path: Path, out: Path, seed: int = 1) -> None:
    meta = json.loads(meta_path.read_text())
    head_path = Path(str(meta_path)[: -len(".json")] + ".head.gz")
    with gzip.open(head_path, "rb") as f:
        head = f.read()
    if hashlib.sha256(head).hexdigest() != meta["header_sha256"]:
        raise SystemExit(f"{head_path}: header does not match {meta_path}")
    rng = np.random.default_rng(seed)
    tmp = out.with_suffix(out.suffix + ".part")
    with open(tmp, "wb") as f:
        f.write(head)
        for t in sorted(meta["tensors"], key=lambda t: t["offset"]):
            if f.tell() > t["offset"]:
                raise SystemExit(f"{t['name']}: tensors overlap")
            f.write(b"\0" * (t["offset"] - f.tell()))
            f.write(_tensor_bytes(t, rng))
        f.write(b"\0" * (meta["size"] - f.tell()))
    tmp.replace(out)


def check(meta_path: Path, path: Path) -> None:
    meta = json.loads(meta_path.read_text())
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(meta["data_offset"])
    ok = size == meta["size"] and hashlib.sha256(head).hexdigest() == meta["header_sha256"]
    print(f"{path.name}: {size} bytes (real {meta['file']}: {meta['size']}), header "
          f"{'equal' if ok else 'DIFFERENT'}, {len(meta['tensors'])} tensors")
    if not ok:
        raise SystemExit(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("header")
    h.add_argument("real", type=Path)
    h.add_argument("prefix", type=Path)
    m = sub.add_parser("make")
    m.add_argument("meta", type=Path)
    m.add_argument("out", type=Path)
    m.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("check")
    c.add_argument("meta", type=Path)
    c.add_argument("path", type=Path)
    a = ap.parse_args()
    if a.cmd == "header":
        header(a.real, a.prefix)
    elif a.cmd == "make":
        make(a.meta, a.out, a.seed)
    else:
        check(a.meta, a.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
