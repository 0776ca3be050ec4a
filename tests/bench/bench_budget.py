"""The runtime's frame budget: aggregate decode of 1 and 8 sessions with at most 4, 8 and 12 ms of
work per 16 ms, as a share of the same without a budget (docs/BENCHMARKS.md).

    .venv/bin/python tests/bench/bench_budget.py [MODEL]        # default: smollm2
"""

from __future__ import annotations

import sys
import time

import geist
from geist import models
from geist.runtime import RuntimeOptions


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else str(models.get("smollm2"))
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(path, engine=eng)

    def run(n: int, tokens: int) -> float:
        ss = [m.session(256) for _ in range(n)]
        for s in ss:
            s.prefill(m.tokenize("Once upon a time"))
        t = time.perf_counter()
        hs = [s.submit([100], max_tokens=tokens, temperature=0.0) for s in ss]
        rs = [h.result(600) for h in hs]
        wall = time.perf_counter() - t
        for s in ss:
            s.close()
        return sum(len(r.ids) for r in rs) / wall

    for n in (1, 8):
        free = run(n, 60)
        for budget in (4.0, 8.0, 12.0):
            eng.configure_runtime(RuntimeOptions(budget_ms=budget, period_ms=16.0))
            got = run(n, 60)
            eng.configure_runtime(RuntimeOptions())
            print(f"npcs {n} budget {budget:.0f}/16 ms: {got:.1f} t/s = {100 * got / free:.0f}% "
                  f"of {free:.1f} (share {100 * budget / 16:.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
