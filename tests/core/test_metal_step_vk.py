"""The Metal forward pass's dispatch plan (native/src/backend/metal/step.c) executed on lavapipe.

No Metal device exists here. The plan's kernels are the SPIR-V that the MSL is translated from,
so build/release/tests/test_metal_step_vk runs step.c's dispatches with them on Vulkan (a small
executor written for this test; the vulkan backend's own forward pass is not used), binding each
buffer as the plan says: the weights in overlapping NoCopy-style views planned as metal.m plans
them (maxBufferLength 1 MiB and 8 MiB here: several views, offsets inside them), each session's
KV at the layer's offset (F32, F16 and INT8 in session/kv.c's rows), the logits gathered for the
rows that want them; K-quant fixtures (Q4_K, Q6_K) take the 256-value activation blocks. Its
logits must match cpu_scalar's as the vulkan backend's do (tests/core/test_vulkan_forward.py: same
greedy ids, 2e-3 relative). What this does NOT check: metal.m's Objective-C, Metal's argument
buffers, the MSL compiler, a Mac (tests/core/test_metal.py, macOS only).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / "build" / "release" / "tests" / "test_metal_step_vk"
_ICDS = [Path("/usr/share/vulkan/icd.d") / n for n in ("lvp_icd.json", "lvp_icd.x86_64.json")]
LVP = next((p for p in _ICDS if p.is_file()), None)
RTOL = 2e-3  # the vulkan backend's on lavapipe (the same kernels)
# the executor's sequence (test_metal_step_vk.c): session A (KV mode kv_a), then A's next token in
# one pass with session B (kv_b)
PROMPT_A = [5, 17, 42, 99, 123, 7, 250, 3]
NEXT_A = 77
PROMPT_B = [11, 200, 150, 8, 64]

pytestmark = pytest.mark.skipif(
    LVP is None or "vulkan" not in geist.backends_available().split(","),
    reason="needs a build with Vulkan and lavapipe (mesa-vulkan-drivers)")


KV_MODES = {"f32": 0, "f16": 1, "int8": 2}  # geist_kv_mode, the executor's arguments


def _reference(path: Path, kv_a: str, kv_b: str) -> np.ndarray:
    eng = geist.Engine(backend="cpu_scalar")
    with geist.Model.load(path, engine=eng) as m:
        a = m.session(max_seq_len=32, kv_mode=kv_a)
        rows = list(a.eval(PROMPT_A))
        rows += list(a.eval([NEXT_A]))
        b = m.session(max_seq_len=32, kv_mode=kv_b)
        rows.append(b.eval(PROMPT_B)[-1])
        a.close()
        b.close()
    eng.close()
    return np.stack(rows)


@pytest.mark.parametrize(("weight_type", "max_buffer", "kv_a", "kv_b"),
                         [("Q8_0", 1 << 20, "f16", "f32"), ("Q4_1", 1 << 20, "f16", "f32"),
                          ("F16", 8 << 20, "f16", "f32"), ("Q4_K", 1 << 20, "int8", "f16"),
                          ("Q6_K", 1 << 20, "f16", "int8")])
def test_the_metal_plan_run_on_vulkan_matches_cpu_scalar(weight_type: str, max_buffer: int,
                                                         kv_a: str, kv_b: str) -> None:
    assert EXE.is_file(), f"{EXE} missing: run `scons variant=release` first"
    path = testing.fixture_path("llama", weight_type)
    xdg = Path(tempfile.gettempdir()) / f"geist-xdg-{os.getuid()}"
    xdg.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, VK_ICD_FILENAMES=str(LVP), VK_DRIVER_FILES=str(LVP),
               XDG_RUNTIME_DIR=str(xdg))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.f32"
        r = subprocess.run([str(EXE), str(path), str(out), str(max_buffer),
                            str(KV_MODES[kv_a]), str(KV_MODES[kv_b])], env=env,
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
        views = int(r.stdout.split(" views")[0].split()[-1])
        got = np.fromfile(out, dtype=np.float32)
    ref = _reference(path, kv_a, kv_b)
    assert views > 1  # overlapping views: tensors at offsets inside them
    assert got.size == ref.size, (got.size, ref.shape)
    got = got.reshape(ref.shape)
    assert [int(np.argmax(x)) for x in got] == [int(np.argmax(x)) for x in ref]
    worst = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a))) for a, b in zip(ref, got,
                                                                                  strict=True))
    assert worst < RTOL, worst
