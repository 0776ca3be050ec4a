"""Memory at the seed bug report's scale (issue 21, item 5): a synthesized 7-8 B-geometry `llama`
Q4_K_M GGUF of ~4.6 GiB, loaded from a caller's buffer, one session of 256, 16 tokens prefilled,
4 decoded; peak RSS above the baseline must stay <= file + KV + 64 MiB (the model aliases the
caller's bytes; only the KV cache, the scratch and a few owned vectors are geist's own).

The file is written once into a cache folder outside the repository (default
~/.cache/geist/seed-scale/) with finite random blocks: random quant bytes, each block's f16
scales set to small finite values, so every dequantized weight is finite; the forward pass is
meaningless text but real arithmetic over every byte. Q4_K_M's mix as llama.cpp's quantizer
makes it: Q4_K everywhere, Q6_K for the output and for attn_v / ffn_down of the first and last
eighth of the layers and every third layer between.

Each measurement runs in a fresh interpreter (tests/memory_isolated.py's reason). llama.cpp's
figure for the same file (peak RSS of llama-cpp-python loading it, n_ctx 256, the same 16 + 4
tokens) comes from its venv when --llama-python is given; llama-cpp-python has no load-from-
buffer entry point, so only its from-file figure (mmap) is measured.

    nice .venv/bin/python tests/bench/seed_scale_memory.py                  # the 4.6 GiB file
    nice .venv/bin/python tests/bench/seed_scale_memory.py --geometry tiny  # a smoke run

Not a pytest test: building the file writes 4.6 GiB and the measurement needs a quiet machine
with ~12 GiB free (the buffer, the page cache); docs/MEMORY.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
SLACK = 64 * MIB


@dataclass(frozen=True)
class Geometry:
    n_vocab: int
    d_model: int
    n_layer: int
    n_head: int
    n_head_kv: int
    d_ff: int


GEOMETRIES = {
    # Llama 3 8B's sizes: Q4_K_M ~4.6 GiB, the seed report's 4.64 GiB file
    "7b": Geometry(n_vocab=128256, d_model=4096, n_layer=32, n_head=32, n_head_kv=8, d_ff=14336),
    "tiny": Geometry(n_vocab=2048, d_model=512, n_layer=4, n_head=8, n_head_kv=2, d_ff=1536),
}

Q4_K, Q6_K = 12, 14
BLOCK = {Q4_K: 144, Q6_K: 210}


def q6_for(name: str, il: int, n_layer: int) -> bool:
    """llama.cpp's Q4_K_M: Q6_K where use_more_bits(il, n) for attn_v and ffn_down."""
    if name not in ("attn_v", "ffn_down"):
        return False
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def _blocks(rng: np.random.Generator, qtype: int, n_blocks: int) -> np.ndarray:
    """n_blocks random blocks with finite f16 scales (d ~ 1e-3, dmin ~ 1e-3)."""
    b = rng.integers(0, 256, (n_blocks, BLOCK[qtype]), dtype=np.uint8)
    d = rng.uniform(5e-4, 2e-3, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if qtype == Q4_K:  # d, dmin at the front
        b[:, 0:2] = d
        b[:, 2:4] = d
    else:  # Q6_K: d at the end; int8 scales stay random (finite by construction)
        b[:, 208:210] = d
    return b


def build(path: Path, g: Geometry, seed: int = 0) -> Path:
    from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType

    rng = np.random.default_rng(seed)
    hd = g.d_model // g.n_head
    tensors: list[tuple[str, int, int, int]] = []  # name, qtype, n_in, n_out

    def mat(name: str, qtype: int, n_in: int, n_out: int) -> None:
        tensors.append((name, qtype, n_in, n_out))

    mat("token_embd.weight", Q4_K, g.d_model, g.n_vocab)
    mat("output.weight", Q6_K, g.d_model, g.n_vocab)
    for il in range(g.n_layer):
        p = f"blk.{il}."
        for role, n_in, n_out in (("attn_q", g.d_model, g.n_head * hd),
                                  ("attn_k", g.d_model, g.n_head_kv * hd),
                                  ("attn_v", g.d_model, g.n_head_kv * hd),
                                  ("attn_output", g.n_head * hd, g.d_model),
                                  ("ffn_gate", g.d_model, g.d_ff), ("ffn_up", g.d_model, g.d_ff),
                                  ("ffn_down", g.d_ff, g.d_model)):
            mat(p + role + ".weight", Q6_K if q6_for(role, il, g.n_layer) else Q4_K, n_in, n_out)
    norms = ["output_norm.weight"] + [f"blk.{il}.{n}.weight" for il in range(g.n_layer)
                                      for n in ("attn_norm", "ffn_norm")]

    tmp = path.with_suffix(".tmp")
    w = GGUFWriter(tmp, "llama")
    w.add_name("geist seed-scale llama Q4_K_M (random blocks)")
    w.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(2)
    w.add_context_length(8192)
    w.add_embedding_length(g.d_model)
    w.add_block_count(g.n_layer)
    w.add_feed_forward_length(g.d_ff)
    w.add_head_count(g.n_head)
    w.add_head_count_kv(g.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(g.n_vocab)
    # a SentencePiece vocabulary: specials, the 256 byte tokens, then plain pieces
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [int(TokenType.CONTROL)] * 3 + [int(TokenType.BYTE)] * 256
    toks += [f"\u2581w{i}" for i in range(g.n_vocab - len(toks))]
    types += [int(TokenType.NORMAL)] * (g.n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(g.n_vocab - 259)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for name, qtype, n_in, n_out in tensors:
        row = n_in // 256 * BLOCK[qtype]
        w.add_tensor_info(name, (n_out, row), np.dtype(np.uint8), n_out * row,
                          raw_dtype=GGMLQuantizationType(qtype))
    for name in norms:
        w.add_tensor_info(name, (g.d_model,), np.dtype(np.float32), g.d_model * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    chunk = {q: _blocks(rng, q, 1 << 16) for q in (Q4_K, Q6_K)}  # ~9-13 MiB, reused
    for _name, qtype, n_in, n_out in tensors:
        n_blocks = n_in // 256 * n_out
        reps = -(-n_blocks // chunk[qtype].shape[0])
        data = np.tile(chunk[qtype], (reps, 1))[:n_blocks]
        w.write_tensor_data(np.ascontiguousarray(data).reshape(-1))
    for _ in norms:
        w.write_tensor_data((1.0 + 0.1 * rng.standard_normal(g.d_model)).astype(np.float32))
    w.close()
    tmp.replace(path)
    return path


def cached_file(cache: Path, geometry: str) -> Path:
    path = cache / f"llama-{geometry}-Q4_K_M-random.gguf"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        build(path, GEOMETRIES[geometry])
        print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB) in {time.time() - t0:.0f} s")
    return path


# --- the measurements, each in a fresh interpreter -------------------------------------------

GEIST_BODY = r"""
import json, sys
sys.path.insert(0, {python!r})
from tests.memory_utils import status_bytes
import geist
path, from_buffer = {path!r}, {from_buffer!r}
eng = geist.default_engine()
base = status_bytes("VmRSS")
if from_buffer:
    size = __import__("os").path.getsize(path)
    buf = bytearray(size)
    with open(path, "rb", buffering=0) as f:
        view, got = memoryview(buf), 0
        while got < size:
            got += f.readinto(view[got:])
    model = geist.Model.from_buffer(buf, engine=eng)
else:
    model = geist.Model.load(path, engine=eng)
s = model.session(max_seq_len=256, kv_mode="f16")
s.prefill(list(range(3, 19)))
ids = [s.step() for _ in range(4)]
print(json.dumps({{"base": base, "peak": status_bytes("VmHWM"), "kv": s.memory()["kv_cache"],
                  "ids": ids}}))
"""

LLAMA_BODY = r"""
import json
import llama_cpp
def st(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
base = st("VmRSS")
llm = llama_cpp.Llama(model_path={path!r}, n_ctx=256, n_threads=2, verbose=False)
llm.eval(list(range(3, 19)))
for _ in range(4):
    llm.eval([int(llm.sample(temp=0.0))])
print(json.dumps({{"base": base, "peak": st("VmHWM")}}))
"""


def _run(python: str, code: str) -> dict[str, Any]:
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=3600, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="7b")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "geist" / "seed-scale"))
    ap.add_argument("--llama-python", default=None,
                    help="a Python with llama_cpp 0.3.36 (tests/bench/install_llama_cpp.sh)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    path = cached_file(Path(args.cache), args.geometry)
    size = path.stat().st_size
    res: dict[str, Any] = {"file": str(path), "file_bytes": size,
                           "geometry": asdict(GEOMETRIES[args.geometry])}
    ok = True
    for label, from_buffer in (("geist_buffer", True), ("geist_file", False)):
        r = _run(sys.executable, GEIST_BODY.format(python=str(ROOT), path=str(path),
                                                   from_buffer=from_buffer))
        above = r["peak"] - r["base"]
        bound = size + r["kv"] + SLACK
        res[label] = r | {"above_baseline": above, "bound": bound}
        print(f"{label}: peak RSS above baseline {above / MIB:.1f} MiB (file {size / MIB:.1f} "
              f"+ KV {r['kv'] / MIB:.1f} + 64 = {bound / MIB:.1f} MiB bound)")
        if from_buffer:
            ok = ok and above <= bound
    if args.llama_python:
        r = _run(args.llama_python, LLAMA_BODY.format(path=str(path)))
        res["llama_cpp_file"] = r | {"above_baseline": r["peak"] - r["base"]}
        print(f"llama.cpp (file, mmap): peak RSS above baseline "
              f"{(r['peak'] - r['base']) / MIB:.1f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    print("PASS" if ok else "FAIL: geist from a buffer went over file + KV + 64 MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
