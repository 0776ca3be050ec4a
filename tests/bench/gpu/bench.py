"""geist's Vulkan backend against llama.cpp's own Vulkan and CUDA builds on the same GPU (issue 16):
one command on the device machine, one JSON + one markdown table into $OUT. Started by
`device.sh bench` (tests/bench/gpu/README.md), which passes the kit's paths.

Protocols (medians of --reps runs after one warm-up, same GPU, same command):
- llama.cpp, per build (vulkan, cuda): `llama-bench -ngl 99 -p 512 -n 128 -r REPS -o json`
  (pp512: 512 tokens from an empty context; tg128: 128 decode steps from an empty context, no
  sampling; median of its per-repetition samples) and `llama-batched-bench -ngl 99 -c 4096
  -b 512 -ub 512 -npp 32 -ntg 64 -npl 1,8 (repeated REPS + 1 times: the first pass compiles
  pipelines) --kv-unified` (S_TG: decode tokens/s of all sequences together).
- geist, backend vulkan, each part in its own process (a refusal or crash is reported, not
  fatal): `python -m geist bench MODEL --backend vulkan --runs REPS --pp 512 --tg 128 --json`
  (the CLI: pp512 from an empty session; tg128 greedy steps after a 128-token prompt);
  the same protocols as llama-bench in process ("matched": pp512 random ids, tg128 forced ids
  from an empty session through decode()); and llama-batched-bench's: N sessions (1, 8) each
  prefill 32 random ids then decode 64 tokens together through the runtime (greedy), decode
  tokens/s after the last first token.
Ratios (the issue's acceptance): decode tg128 geist / llama.cpp Vulkan (>= 1.5) and / CUDA
(>= 1.0); prefill pp512 geist / Vulkan (>= 1.0); 8 sessions geist / 1 session (>= 5) and
geist 8 / llama-batched-bench Vulkan 8 (>= 2).

`--fast` (session 23) runs geist's parts with GEIST_DEVICE_FAST (Engine(fast=True), `geist bench
--fast`: decode's products on float activations, docs/VULKAN.md) and keeps them apart
("geist_fast", its ratios "ratios_fast"), so one call may measure both modes.

Results accumulate in WORK/results.json, so a later call (the llama.cpp part once its builds are
done) adds to an earlier one (the geist part); every call writes the whole set to $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODELS = ("smollm2", "gemma3")
BUILDS = ("vulkan", "cuda")
NPL = (1, 8)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _spread(xs: list[float]) -> float | None:
    return (max(xs) - min(xs)) if len(xs) > 1 else None


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                           check=False)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out, f"timed out after {timeout:.0f} s"
    except OSError as e:
        return 127, "", f"{cmd[0]}: {e}"


def _tail(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


# ---------------------------------------------------------------- llama.cpp


def llama_bench(bindir: Path, model: Path, env: dict[str, str], reps: int) -> dict[str, Any]:
    rc, out, err = _run([str(bindir / "llama-bench"), "-m", str(model), "-ngl", "99", "-p", "512",
                         "-n", "128", "-r", str(reps), "-o", "json"], env, 300)
    if rc != 0:
        return {"error": f"llama-bench exit {rc}: {_tail(err)}"}
    rows = json.loads(out)
    res: dict[str, Any] = {}
    for r in rows:
        key = "pp512" if r.get("n_gen") == 0 else "tg128" if r.get("n_prompt") == 0 else None
        if key is None:
            continue
        samples = [float(x) for x in r.get("samples_ts") or [r["avg_ts"]]]
        res[key] = {"median": _median(samples), "spread": _spread(samples), "samples": samples,
                    "avg": r.get("avg_ts"), "stddev": r.get("stddev_ts")}
        res["build"] = f"{r.get('build_commit')} ({r.get('build_number')})"
        res["backends"] = r.get("backends")
        res["gpu_info"] = r.get("gpu_info")
        res["flash_attn"] = r.get("flash_attn")
    return res


def llama_batched(bindir: Path, model: Path, env: dict[str, str], reps: int) -> dict[str, Any]:
    npl = ",".join(",".join(map(str, NPL)) for _ in range(reps + 1))
    rc, out, err = _run([str(bindir / "llama-batched-bench"), "-m", str(model), "-ngl", "99",
                         "-c", "4096", "-b", "512", "-ub", "512", "-npp", "32", "-ntg", "64",
                         "-npl", npl, "--kv-unified"], env, 300)
    if rc != 0:
        return {"error": f"llama-batched-bench exit {rc}: {_tail(err)}"}
    seen: dict[int, list[float]] = {n: [] for n in NPL}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # columns: PP TG B N_KV T_PP S_PP T_TG S_TG T S
        if len(cells) >= 10 and cells[0] == "32" and cells[1] == "64" and cells[2].isdigit():
            b = int(cells[2])
            if b in seen:
                seen[b].append(float(cells[7]))
    res: dict[str, Any] = {}
    for n, xs in seen.items():
        warm = xs[1:]  # the first pass compiles pipelines
        res[f"npl{n}"] = {"median": _median(warm), "spread": _spread(warm), "samples": warm,
                          "first_pass": xs[0] if xs else None}
    return res


# ---------------------------------------------------------------- geist, in its own process


def geist_matched(path: str, reps: int, parts: set[str], fast: bool = False) -> dict[str, Any]:
    """llama-bench's and llama-batched-bench's protocols through geist's Python API (vulkan)."""
    import numpy as np

    import geist

    eng = geist.Engine(backend="vulkan", fast=fast)
    out: dict[str, Any] = {"device": eng.device}
    try:
        m = geist.Model.load(path, engine=eng)
        rng = np.random.default_rng(1)
        pp: list[float] = []
        tg: list[float] = []
        for r in range(reps + 1 if "matched" in parts else 0):  # the first is a warm-up
            ids = [int(x) for x in rng.integers(100, m.n_vocab - 100, 512)]
            with m.session(max_seq_len=520) as s:
                t0 = time.perf_counter()
                s.prefill(ids)
                t1 = time.perf_counter()
            with m.session(max_seq_len=136) as s:
                t2 = time.perf_counter()
                for tok in ids[:128]:
                    s.decode(tok)
                t3 = time.perf_counter()
            if r:
                pp.append(512 / (t1 - t0))
                tg.append(128 / (t3 - t2))
        if pp:
            out["pp512"] = {"median": _median(pp), "spread": _spread(pp), "samples": pp}
            out["tg128"] = {"median": _median(tg), "spread": _spread(tg), "samples": tg}
        for n in NPL if "npcs" in parts else ():
            rates: list[float] = []
            walls: list[float] = []
            short = 0
            for r in range(reps + 1):
                sess = [m.session(max_seq_len=128) for _ in range(n)]
                prompts = [[int(x) for x in rng.integers(100, m.n_vocab - 100, 32)]
                           for _ in range(n)]
                t0 = time.perf_counter()
                hs = [s.submit(p, max_tokens=64, temperature=0.0)
                      for s, p in zip(sess, prompts, strict=True)]
                res = [h.result(600) for h in hs]
                t_end = time.perf_counter()
                first = max(t0 + (x.first_token_s or 0.0) for x in res)
                decoded = sum(max(len(x.ids) - 1, 0) for x in res)
                short += sum(len(x.ids) < 64 for x in res)
                if r:
                    rates.append(decoded / max(t_end - first, 1e-9))
                    walls.append(sum(len(x.ids) for x in res) / (t_end - t0))
                for s in sess:
                    s.close()
            out[f"npl{n}"] = {"median": _median(rates), "spread": _spread(rates),
                              "samples": rates, "wall_aggregate_median": _median(walls),
                              "requests_ended_before_64_tokens": short}
        if "reply" in parts:
            # the first token of an NPC reply: a 128-token persona computed once as a shared
            # prefix, a session on it per reply, a 16-token player line through the runtime
            # (submit -> first token id), the game's path
            persona = m.prefix([int(x) for x in rng.integers(100, m.n_vocab - 100, 128)])
            # first token: when its token event reached the caller (Result.first_token_s, the
            # game's signal); request: until the request ended, which also runs the token into
            # the session's KV (one decode pass more) so that the conversation can go on
            ms: list[float] = []
            req_ms: list[float] = []
            for r in range(reps + 1):
                line = [int(x) for x in rng.integers(100, m.n_vocab - 100, 16)]
                with m.session(max_seq_len=192, prefix=persona) as s:
                    t0 = time.perf_counter()
                    res1 = s.submit(line, max_tokens=1, temperature=0.0).result(60)
                    t1 = time.perf_counter()
                if r and res1.ids and res1.first_token_s is not None:
                    ms.append(1000 * res1.first_token_s)
                    req_ms.append(1000 * (t1 - t0))
            persona.close()
            out["reply_first_token_ms"] = {"median": _median(ms), "spread": _spread(ms),
                                           "samples": ms}
            out["reply_request_ms"] = {"median": _median(req_ms), "spread": _spread(req_ms),
                                       "samples": req_ms}
        m.close()
    finally:
        eng.close()
    return out


def geist_load_check(path: str) -> dict[str, Any]:
    """The stand-in loads in geist (the default host backend) and gives finite logits."""
    import numpy as np

    import geist

    m = geist.Model.load(path)
    try:
        with m.session(max_seq_len=16) as s:
            logits = s.eval(m.tokenize("Once upon a time"))
        return {"backend": m.backend, "architecture": m.info["architecture"],
                "finite_logits": bool(np.isfinite(logits).all())}
    finally:
        m.close()


PARTS = ("load", "cli", "matched", "npcs", "cli-npcs", "reply")


def geist_part(model: Path, env: dict[str, str], reps: int, parts: set[str],
               fast: bool = False) -> dict[str, Any]:
    res: dict[str, Any] = {"fast": fast}
    flag = ["--fast"] if fast else []
    py = sys.executable
    me = str(Path(__file__).resolve())

    def sub(args: list[str], timeout: float) -> tuple[Any, str | None]:
        rc, out, err = _run(args, env, timeout)
        if rc != 0:
            return None, f"exit {rc}: {_tail(err or out, 6)}"
        return json.loads(out.strip().splitlines()[-1] if args[1] == me else out), None

    if "load" in parts:
        res["load_check"], e = sub([py, me, "--geist-load", str(model)], 120)
        if e:
            res["load_check_error"] = e
    if "cli" in parts:
        rows, e = sub([py, "-m", "geist", "bench", str(model), "--backend", "vulkan", "--runs",
                       str(reps), "--pp", "512", "--tg", "128", "--json", *flag], 400)
        if e:
            res["cli_error"] = e
        else:
            res["cli"] = rows[0]
            res["cli_command"] = (f"geist bench MODEL --backend vulkan --runs {reps} --pp 512 "
                                  "--tg 128 --json" + (" --fast" if fast else ""))
    if parts & {"matched", "npcs", "reply"} and "cli_error" not in res:
        what = ",".join(sorted(parts & {"matched", "npcs", "reply"}))
        res["matched"], e = sub([py, me, "--geist-matched", str(model), "--reps", str(reps),
                                 "--parts", what, *flag], 600)
        if e:
            res["matched_error"] = e
    if "cli-npcs" in parts and "cli_error" not in res:
        res["cli_npcs"], e = sub([py, "-m", "geist", "bench", str(model), "--backend", "vulkan",
                                  "--npcs", ",".join(map(str, NPL)), "--tg", "64", "--json",
                                  *flag], 300)
        if e:
            res["cli_npcs"] = {"error": e}
    return res


# ---------------------------------------------------------------- report


def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _cli_value(cli: Any, key: str) -> float | None:
    v = _get(cli, key)
    return float(v[0]) if isinstance(v, list) and v else None


def ratios(m: dict[str, Any], key: str = "geist") -> dict[str, Any]:
    g = m.get(key, {})
    tg = _cli_value(g.get("cli"), "tg128_tps")
    pp = _cli_value(g.get("cli"), "pp512_tps")
    tg_m = _get(g, "matched", "tg128", "median")  # llama-bench's protocol (warm, in process)
    pp_m = _get(g, "matched", "pp512", "median")
    g8 = _get(g, "matched", "npl8", "median")
    g1 = _get(g, "matched", "npl1", "median")
    lv = m.get("llama", {}).get("vulkan", {})
    lc = m.get("llama", {}).get("cuda", {})

    def q(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    return {
        "decode_vs_vulkan": {"value": q(tg, _get(lv, "bench", "tg128", "median")), "target": 1.5},
        "decode_vs_cuda": {"value": q(tg, _get(lc, "bench", "tg128", "median")), "target": 1.0},
        "prefill_vs_vulkan": {"value": q(pp, _get(lv, "bench", "pp512", "median")),
                              "target": 1.0},
        "prefill_vs_cuda": {"value": q(pp, _get(lc, "bench", "pp512", "median")),
                            "target": None},
        # the same against geist run as llama-bench runs (a warm-up, then the repetitions on one
        # loaded model: `geist bench` loads the model anew for every run)
        "decode_vs_vulkan_matched": {"value": q(tg_m, _get(lv, "bench", "tg128", "median")),
                                     "target": 1.5},
        "decode_vs_cuda_matched": {"value": q(tg_m, _get(lc, "bench", "tg128", "median")),
                                   "target": 1.0},
        "prefill_vs_vulkan_matched": {"value": q(pp_m, _get(lv, "bench", "pp512", "median")),
                                      "target": 1.0},
        "npcs8_vs_1": {"value": q(g8, g1), "target": 5.0},
        "npcs8_vs_batched_vulkan": {"value": q(g8, _get(lv, "batched", "npl8", "median")),
                                    "target": 2.0},
        "npcs8_vs_batched_cuda": {"value": q(g8, _get(lc, "batched", "npl8", "median")),
                                  "target": None},
        # milliseconds, not a ratio: at most 5 (the bound on the H200)
        "reply_first_token_ms": {"value": _get(g, "matched", "reply_first_token_ms", "median"),
                                 "target": 5.0},
        "reply_request_ms": {"value": _get(g, "matched", "reply_request_ms", "median"),
                             "target": None},
    }


def _f(v: Any, nd: int = 0) -> str:
    return "-" if v is None else f"{v:,.{nd}f}"


def _geist_rows(name: str, g: dict[str, Any], mode: str) -> list[str]:
    """geist's rows of the table (mode: "" or " --fast")."""
    if "cli" in g or "matched" in g:
        cli = g.get("cli")
        rows = [f"| {name} | geist vulkan{mode} (`geist bench`) | "
                f"{_f(_cli_value(cli, 'pp512_tps'))} | "
                f"{_f(_cli_value(cli, 'tg128_tps'), 1)} | "
                f"{_f(_get(g, 'matched', 'npl1', 'median'), 1)} | "
                f"{_f(_get(g, 'matched', 'npl8', 'median'), 1)} |"]
        if _get(g, "matched", "pp512") is not None:
            rows.append(f"| {name} | geist vulkan{mode} (llama-bench's protocol) | "
                        f"{_f(_get(g, 'matched', 'pp512', 'median'))} | "
                        f"{_f(_get(g, 'matched', 'tg128', 'median'), 1)} | | |")
        return rows
    if g:
        why = (g.get("cli_error") or g.get("matched_error") or "?").splitlines()[-1]
        return [f"| {name} | geist vulkan{mode} | not run on the device: {why[:120]} | | | |"]
    return []


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# GPU benchmark ({report['env'].get('gpu', '?')}), {report['updated']}", "",
             "Models: same-geometry stand-ins of the real files (header, tokenizer, tensor "
             "names/shapes/types byte-equal; weights from a seeded generator). tokens/s, "
             f"medians of {report['reps']} runs (spread = max - min).", "",
             "| model | | pp512 | tg128 | 1 seq (npp32 ntg64) | 8 seqs aggregate |",
             "|---|---|---|---|---|---|"]
    for name, m in report["models"].items():
        for b in BUILDS if "llama" in m else ():
            lb = _get(m, "llama", b) or {}
            err = _get(lb, "bench", "error") or _get(lb, "batched", "error") or lb.get("error")
            if err:
                lines.append(f"| {name} | llama.cpp {b} | {err.splitlines()[-1][:80]} | | | |")
                continue
            lines.append(f"| {name} | llama.cpp {b} | "
                         f"{_f(_get(lb, 'bench', 'pp512', 'median'))} | "
                         f"{_f(_get(lb, 'bench', 'tg128', 'median'), 1)} | "
                         f"{_f(_get(lb, 'batched', 'npl1', 'median'), 1)} | "
                         f"{_f(_get(lb, 'batched', 'npl8', 'median'), 1)} |")
        for key, mode in (("geist", ""), ("geist_fast", " --fast")):
            lines += _geist_rows(name, m.get(key, {}), mode)
    quiet = []  # what each part found before it started (wait_quiet)
    for name, m in report["models"].items():
        parts = [(f"llama.cpp {b}", _get(m, "llama", b, "quiet_before")) for b in BUILDS]
        parts += [(k, _get(m, k, "quiet_before")) for k in ("geist", "geist_fast")]
        quiet += [f"{name} {who}: CPUs {100 * q['cpu_busy']:.1f} % busy after {q['waited_s']} s, "
                  f"1-min load {q['loadavg']:.2f}" for who, q in parts if q]
    if quiet:
        lines += ["", "Before each part: " + "; ".join(quiet) + "."]
    lines += ["", "| model | ratio | value | target |", "|---|---|---|---|"]
    for name, m in report["models"].items():
        rs = [(k, r) for k, r in m.get("ratios", {}).items()]
        rs += [(f"{k} (fast)", r) for k, r in m.get("ratios_fast", {}).items()]
        for k, r in rs:
            tgt = "-" if r["target"] is None else f">= {r['target']}"
            ms = k.split(" ")[0].endswith("_ms")
            unit = " ms" if ms else "x"
            tgt = tgt.replace(">=", "<=") if ms else tgt
            val = "-" if r["value"] is None else f"{r['value']:.2f}{unit}"
            lines.append(f"| {name} | {k} | {val} | {tgt} |")
    lines += ["", "geist decode (tg128) and prefill (pp512) ratios use `geist bench` (a model "
              "loaded anew every run), the *_matched ones llama-bench's protocol (a warm-up, then "
              "the runs on one loaded model, as llama-bench); the 8-session ratios use the "
              "llama-batched-bench protocol (decode tokens/s after the last first token)."]
    return "\n".join(lines) + "\n"


def cpu_busy(seconds: float = 2.0) -> float:
    """The machine's CPU busy share over `seconds` (from /proc/stat; 0 where it cannot be read):
    the load average lags by minutes (a 16-core build's tail read 7.9 two minutes after it
    ended, session 22), this says whether anything runs now."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except (OSError, ValueError):
        return 0.0
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(limit_s: float = 60.0, busy_max: float = 0.05) -> dict[str, Any]:
    """Before a part: wait (at most limit_s) until the CPUs are idle (busy below busy_max over 2
    s); what was found is recorded beside the part's figures."""
    t0 = time.time()
    busy = cpu_busy()
    while busy > busy_max and time.time() - t0 < limit_s:
        busy = cpu_busy()
    return {"cpu_busy": round(busy, 4), "waited_s": round(time.time() - t0, 1),
            "loadavg": os.getloadavg()[0]}


def environment(env: dict[str, str]) -> dict[str, Any]:
    info: dict[str, Any] = {"loadavg_start": os.getloadavg()[0], "cores": os.cpu_count()}
    rc, out, _ = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                       "--format=csv,noheader"], env, 30)
    if rc == 0 and out.strip():
        info["gpu"] = out.strip()
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kit", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--work", type=Path, default=Path("/opt/gpukit"))
    ap.add_argument("--geist-ld", default="/opt/vk/usr/lib/x86_64-linux-gnu")
    ap.add_argument("--llama-vulkan-ld", default="/opt/vksid/usr/lib/x86_64-linux-gnu:"
                    "/opt/vk/usr/lib/x86_64-linux-gnu")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--only", choices=("geist", "llama"), default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="geist parts: load (the stand-in loads on the host backend), cli "
                    "(geist bench pp512/tg128), matched (llama-bench's pp512/tg128 protocol), "
                    "npcs (llama-batched-bench's protocol, 1 and 8 sessions), cli-npcs "
                    "(`geist bench --npcs 1,8`, one pass)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "."))
    ap.add_argument("--fresh", action="store_true", help="forget WORK/results.json first")
    ap.add_argument("--fast", action="store_true",
                    help="geist's parts with GEIST_DEVICE_FAST, kept as geist_fast")
    ap.add_argument("--geist-matched", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--geist-load", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if parts - set(PARTS):
        ap.error(f"unknown parts {sorted(parts - set(PARTS))} (known: {', '.join(PARTS)})")
    if a.geist_matched:
        print(json.dumps(geist_matched(a.geist_matched, a.reps, parts, a.fast)))
        return 0
    if a.geist_load:
        print(json.dumps(geist_load_check(a.geist_load)))
        return 0

    base = dict(os.environ)
    genv = dict(base, LD_LIBRARY_PATH=a.geist_ld, PYTHONUNBUFFERED="1",
                PYTHONPATH=f"{a.kit / 'python'}:{a.work / 'site'}")
    store = a.work / "results.json"
    report: dict[str, Any] = (json.loads(store.read_text()) if store.exists() and not a.fresh
                              else {"models": {}})
    report["reps"] = a.reps
    report["env"] = environment(base)
    manifest = a.kit / "MANIFEST.txt"
    if manifest.exists():
        report["kit"] = manifest.read_text().splitlines()
    for name in a.models:
        model = a.work / "models" / f"{name}.gguf"
        meta = json.loads((a.kit / "models" / f"{name}.json").read_text())
        m = report["models"].setdefault(name, {})
        m["model"] = {"standin_of": meta["file"], "size": meta["size"],
                      "real_sha256": meta["file_sha256"], "path": str(model)}
        if a.only in (None, "llama"):
            m["llama"] = {}
            for b in BUILDS:
                bindir = a.work / f"build-{b}" / "bin"
                if not (bindir / "llama-bench").exists():
                    log = a.work / "logs" / f"build-{b}.log"
                    tail = _tail(log.read_text(errors="replace"), 20) if log.exists() else ""
                    m["llama"][b] = {"error": f"not built ({log})", "build_log_tail": tail}
                    continue
                lenv = dict(base, LD_LIBRARY_PATH=a.llama_vulkan_ld) if b == "vulkan" else base
                quiet = wait_quiet()
                t0 = time.time()
                m["llama"][b] = {"quiet_before": quiet,
                                 "bench": llama_bench(bindir, model, lenv, a.reps),
                                 "batched": llama_batched(bindir, model, lenv, a.reps),
                                 "seconds": round(time.time() - t0, 1),
                                 "loadavg": os.getloadavg()[0]}
                print(name, "llama.cpp", b, json.dumps(m["llama"][b])[:400], flush=True)
        if a.only in (None, "geist"):
            key = "geist_fast" if a.fast else "geist"
            quiet = wait_quiet()
            t0 = time.time()
            m[key] = geist_part(model, genv, a.reps, parts, a.fast)
            m[key]["quiet_before"] = quiet
            m[key]["seconds"] = round(time.time() - t0, 1)
            m[key]["loadavg"] = os.getloadavg()[0]
            print(name, key, json.dumps(m[key])[:600], flush=True)
        m["ratios"] = ratios(m)
        if "geist_fast" in m:
            m["ratios_fast"] = ratios(m, "geist_fast")
    report["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    store.write_text(json.dumps(report, indent=1))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gpubench.json").write_text(json.dumps(report, indent=1))
    md = markdown(report)
    (a.out / "gpubench.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
