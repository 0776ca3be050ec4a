"""Runs a test body in a fresh interpreter: RSS deltas are only meaningful in a process whose
allocator history (earlier tests' freed blocks, thread arenas) does not absorb the allocations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def run_isolated(module: str, func: str, *args: object) -> str:
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import {module} as t; "
            f"t.{func}(*{args!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=TESTS.parent, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout
