"""Runs a test body in a fresh interpreter: RSS deltas are only meaningful in a process whose
allocator history (earlier tests' freed blocks, thread arenas) does not absorb the allocations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_isolated(module: str, func: str, *args: object) -> str:
    """Calls `module.func(*args)` in a new interpreter; `module` is a dotted name under the
    repository root (a test passes its own `__name__`, e.g. tests.sessions.test_memory)."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); import {module} as t; "
            f"t.{func}(*{args!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=REPO, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout
