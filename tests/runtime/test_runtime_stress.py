"""The runtime stress test (native/tests/test_runtime_stress.c): 32 sessions x 4 submitting
threads x 2000 tokens with random cancels on a fixture model; every request ends exactly once,
poll keeps its timeout, freeing sessions and the engine while requests run is safe. Runs the
release build always, and the tsan / asan builds when they exist (`scons variant=tsan,asan`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from geist import testing

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("variant", ["release", "asan", "tsan"])
def test_runtime_stress(variant: str, tmp_path: Path) -> None:
    exe = REPO / "build" / variant / "tests" / "test_runtime_stress"
    if not exe.is_file():
        pytest.skip(f"{variant} build not present (scons variant={variant})")
    model = testing.build_fixture(tmp_path / "m.gguf", arch="llama", weight_type="Q8_0", seed=1)
    tokens = "2000" if variant == "release" else "600"  # sanitizers are ~30x slower
    env = {"TSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1"}
    out = subprocess.run([str(exe), str(model), tokens], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok" in out.stdout
    assert "WARNING: ThreadSanitizer" not in out.stderr
