"""What the game's main thread pays for talking NPCs, in real headless Godot: say() and one
frame's event drain, timed with N sessions (default 8) over T turns (default 30) of SmolLM2.

    .venv/bin/python tests/bench/bench_godot_main_thread.py [--npcs 8] [--turns 30] [--json OUT]

Needs scripts/setup.sh (Godot in ~/.cache/geist/godot, the addon built). A benchmark, not a test:
it prints medians, p99 and max; the figures go to docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from geist import models

ROOT = Path(__file__).resolve().parents[2]
ADDON = ROOT / "addons" / "geist"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--npcs", type=int, default=8)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--cap", type=int, default=256)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    godot = subprocess.run([str(ROOT / "scripts" / "setup_godot.sh")], capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        proj = Path(tmp) / "proj"
        (proj / "addons").mkdir(parents=True)
        (proj / "project.godot").write_text('config_version=5\n\n[application]\n'
                                            'config/name="geist bench"\n')
        (proj / "addons" / "geist").symlink_to(ADDON)
        (proj / ".godot").mkdir()
        (proj / ".godot" / "extension_list.cfg").write_text(
            "res://addons/geist/geist.gdextension\n")
        shutil.copy(Path(__file__).parent / "godot" / "bench_main_thread.gd", proj)
        out = Path(tmp) / "out.json"
        env = dict(os.environ, XDG_CONFIG_HOME=tmp, XDG_DATA_HOME=tmp, XDG_CACHE_HOME=tmp)
        r = subprocess.run([godot, "--headless", "--path", str(proj), "--script",
                            "res://bench_main_thread.gd", "--", "--model",
                            str(models.smollm2_path()), "--npcs", str(a.npcs), "--turns",
                            str(a.turns), "--max-tokens", str(a.max_tokens), "--cap",
                            str(a.cap), "--json", str(out)],
                           capture_output=True, text=True, env=env, check=False)
        if r.returncode != 0 or not out.is_file():
            print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
            return 1
        data = json.loads(out.read_text())
    load = os.getloadavg()[0]
    data["loadavg_1min_after"] = load
    for k in ("say_ms", "drain_ms"):
        st = data[k]
        print(f"{k}: median {st['median']:.4f}  p99 {st['p99']:.4f}  max {st['max']:.4f} "
              f"(n={st['n']})")
    print(f"say() median by turn: {[round(x, 4) for x in data['say_ms_median_by_turn']]}")
    print(f"{data['replies']} replies, {data['failed']} failed, {data['wall_s']:.1f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
