"""`geist plan`: how many NPC sessions fit, from a GGUF's metadata alone (no weights loaded).

The formulas are those of docs/MEMORY.md and of the native accounting (session.memory()); the
tests hold them to `memory()` and to measured RSS.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KV_MODES = ("f32", "f16", "int8", "int4", "kivi2")
KIVI_GROUP = 32  # tokens per KIVI block (GT_KIVI_GROUP)
QGROUP = 32  # channels per INT4 / KIVI-V scale group (GT_QGROUP)

# Small per-object overheads of the native structs (exact enough: they are < 1 KB)
_SESSION_STRUCT = 704  # sizeof(struct geist_session); tests/core/test_plan.py holds it to memory()
_LAYER_STRUCT = 40


@dataclass(frozen=True)
class Geometry:
    """The facts the KV formulas need (from metadata, or from a loaded model's info)."""

    n_layer: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_ctx_train: int
    sliding_window: int
    sliding_layers: tuple[int, ...]


def _groups(hd: int) -> int:
    return (hd + QGROUP - 1) // QGROUP


def head_bytes(mode: str, hd: int) -> int:
    """Bytes of one position of one KV head (KIVI: the per-token V record)."""
    if mode == "f32":
        return 4 * hd
    if mode == "f16":
        return 2 * hd
    if mode == "int8":
        return 4 + hd
    if mode == "int4":
        return _groups(hd) * (2 + QGROUP // 2)
    if mode == "kivi2":
        return _groups(hd) * (4 + QGROUP // 4)
    raise ValueError(f"unknown kv mode {mode!r}; choose from {KV_MODES}")


def layer_rows(g: Geometry, mode: str, sliding: bool, cap: int) -> int:
    if mode == "kivi2":
        wr = -(-g.sliding_window // KIVI_GROUP) * KIVI_GROUP
        return wr if sliding and wr < cap else cap // KIVI_GROUP * KIVI_GROUP
    return g.sliding_window if sliding and g.sliding_window < cap else cap


def kv_bytes(g: Geometry, cap: int, mode: str) -> int:
    """KV bytes of a session holding `cap` own positions (what session.memory()['kv_cache']
    reports)."""
    total = 0
    vrow = g.n_head_kv * head_bytes(mode, g.head_dim_v)
    for layer in range(g.n_layer):
        rows = layer_rows(g, mode, layer in g.sliding_layers, cap)
        if mode == "kivi2":
            kblock = g.n_head_kv * g.head_dim_k * (4 + KIVI_GROUP // 4)
            resid = KIVI_GROUP * g.n_head_kv * (g.head_dim_k + g.head_dim_v) * 2
            total += rows // KIVI_GROUP * kblock + rows * vrow + resid
        else:
            total += rows * (g.n_head_kv * head_bytes(mode, g.head_dim_k) + vrow)
    return total


def session_bytes(g: Geometry, cap: int, mode: str, n_prefix: int = 0) -> dict[str, int]:
    """What one session holds: KV for its own positions, its logits row, its structs."""
    own = cap - n_prefix
    return {
        "kv_cache": kv_bytes(g, own, mode),
        "scratch": 4 * g.n_vocab,
        "other": _SESSION_STRUCT + _LAYER_STRUCT * g.n_layer + 4 * own,
    }


def geometry_from_gguf(path: str | Path) -> tuple[Geometry, dict[str, Any]]:
    """Reads the geometry from the GGUF metadata (the file is mapped, weights are not read)."""
    from geist.reference import _field, open_gguf, read_config

    reader = open_gguf(path)
    cfg = read_config(reader)
    merges = reader.fields.get("tokenizer.ggml.merges")
    facts = {
        "file_bytes": Path(path).stat().st_size,
        "n_merges": len(merges.data) if merges is not None else 0,
        "arch": cfg.arch,
        "name": _field(reader, "general.name", ""),
    }
    geom = Geometry(
        n_layer=cfg.n_layer, n_head_kv=cfg.n_head_kv, head_dim_k=cfg.head_dim_k,
        head_dim_v=cfg.head_dim_v, n_vocab=cfg.vocab_size, n_ctx_train=cfg.context_length,
        sliding_window=cfg.sliding_window,
        sliding_layers=tuple(i for i in range(cfg.n_layer) if cfg.is_sliding(i)))
    return geom, facts


def make_plan(path: str | Path, npcs: int, max_seq_len: int, kv_mode: str,
              prefix_tokens: int = 0, budget_bytes: int | None = None) -> dict[str, Any]:
    g, facts = geometry_from_gguf(path)
    if not 1 <= max_seq_len <= g.n_ctx_train:
        raise ValueError(f"max_seq_len must be 1..{g.n_ctx_train}")
    if not 0 <= prefix_tokens < max_seq_len:
        raise ValueError("the shared prefix must be shorter than max_seq_len")
    per = session_bytes(g, max_seq_len, kv_mode, prefix_tokens)
    per_total = sum(per.values())
    prefix = 0
    if prefix_tokens:
        prefix = kv_bytes(g, prefix_tokens, kv_mode) + 4 * g.n_vocab + 4 * prefix_tokens
    # model: the weights' pages (all touched by the first decode) + owned tables (an estimate:
    # tokenizer ~14 B per token + ~28 B per merge, index tables and structs ~64 KB)
    model_owned = 14 * g.n_vocab + 28 * facts["n_merges"] + 64 * 1024
    model = facts["file_bytes"] + model_owned
    sessions = npcs * per_total
    out: dict[str, Any] = {
        "model": str(path), "arch": facts["arch"], "kv_mode": kv_mode, "npcs": npcs,
        "max_seq_len": max_seq_len, "prefix_tokens": prefix_tokens,
        "geometry": asdict(g) | {"sliding_layers": list(g.sliding_layers)},
        "model_file_bytes": facts["file_bytes"], "model_owned_estimate": model_owned,
        "per_session": per | {"total": per_total},
        "sessions_bytes": sessions, "shared_prefix_bytes": prefix,
        "total_bytes": model + sessions + prefix,
    }
    if budget_bytes is not None:
        room = budget_bytes - model - prefix
        out["budget_bytes"] = budget_bytes
        out["npcs_that_fit"] = max(0, room // per_total)
    return out


def format_plan(p: dict[str, Any]) -> str:
    mib = 2**20
    per = p["per_session"]
    lines = [
        f"model      {p['model']} ({p['arch']})",
        f"weights    {p['model_file_bytes'] / mib:10.2f} MiB  (file pages, shared by all NPCs)",
        f"tables     {p['model_owned_estimate'] / mib:10.2f} MiB  (tokenizer, index; estimate)",
        f"per NPC    {per['total'] / mib:10.3f} MiB  = KV {per['kv_cache'] / mib:.3f} "
        f"({p['kv_mode']}, cap {p['max_seq_len']}) + logits {per['scratch'] / mib:.3f} "
        f"+ other {per['other'] / mib:.3f}",
    ]
    if p["prefix_tokens"]:
        lines.append(f"prefix     {p['shared_prefix_bytes'] / mib:10.3f} MiB  "
                     f"({p['prefix_tokens']} tokens, resident once)")
    lines += [
        f"{p['npcs']} NPCs    {p['sessions_bytes'] / mib:10.2f} MiB",
        f"total      {p['total_bytes'] / mib:10.2f} MiB",
    ]
    if "budget_bytes" in p:
        lines.append(f"budget     {p['budget_bytes'] / mib:10.2f} MiB: {p['npcs_that_fit']} NPCs "
                     "fit")
    return "\n".join(lines)
