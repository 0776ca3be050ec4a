"""The metal backend on a Mac (Darwin only; everywhere else these tests skip and say why).

NOT RUN IN THIS REPOSITORY'S OWN CI: they run on the macos-14 runner of
.github/workflows/macos.yml, for users of the repository. What runs everywhere instead: the buffer
planner and the KV layout (native/tests/test_metal_planner.c) and the kernels' MSL translation
(tests/core/test_msl.py).

On a Mac they check the device interface of native/src/backend/metal/metal.m: the engine opens
the default device; read-only bytes (load_from_memory of a read-only mapping, and load(path)) are
wrapped in place, owning 0 weight bytes; GEIST_DEVICE_NO_IMPORT copies and counts them; the
device-memory cap; the forward pass against cpu_scalar (greedy ids and logits, as the vulkan
backend's tests on lavapipe), sessions batched in one step, and the refusals (KV modes, shared
prefixes, models the device does not run).
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing
from geist.errors import GeistError

pytestmark = pytest.mark.skipif(
    sys.platform != "darwin",
    reason="the metal backend is built on macOS only (.github/workflows/macos.yml runs these)")


def _fixture() -> Path:
    return testing.fixture_path("llama", "Q8_0")


def test_the_mac_build_has_the_metal_backend() -> None:
    # on Darwin the build must include it (SConstruct needs glslc and spirv-cross): no silent skip
    assert "metal" in geist.backends_available().split(","), geist.backends_available()


def test_engine_opens_the_default_device() -> None:
    eng = geist.Engine(backend="metal")
    assert eng.backend == "metal" and eng.device != ""
    eng.close()
    with pytest.raises(GeistError, match="no device with index 99"):
        geist.Engine(backend="metal", device=99)


@pytest.mark.parametrize("how", ["memory", "file"])
def test_read_only_bytes_are_wrapped_in_place(how: str) -> None:
    path = _fixture()
    eng = geist.Engine(backend="metal")
    with open(path, "rb") as f:
        ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # page-aligned, read-only
    model = (geist.Model.from_buffer(ro, engine=eng) if how == "memory"
             else geist.Model.load(path, engine=eng))
    mem = model.memory()
    # one copy of the weights: the caller's pages (or the file mapping) under NoCopy views; the
    # device's own bytes after load are the norm vectors' buffer of the forward pass (F32)
    info = model.info
    assert mem["weights_owned"] == 0
    assert mem["device_local"] == (2 * info["n_layer"] + 1) * info["d_model"] * 4
    assert mem["imported"] >= mem["weights_aliased"] > 0
    model.close()
    eng.close()


def test_no_import_copies_and_counts() -> None:
    path = _fixture()
    eng = geist.Engine(backend="metal", no_import=True)
    model = geist.Model.from_buffer(path.read_bytes(), engine=eng)
    mem = model.memory()
    assert mem["imported"] == 0 and mem["weights_aliased"] == 0
    assert mem["device_local"] >= path.stat().st_size // 2 > 0
    model.close()
    eng.close()


def test_device_memory_cap_below_the_copies() -> None:
    eng = geist.Engine(backend="metal", no_import=True, device_memory_limit=4096)
    with pytest.raises(GeistError, match="device_memory_limit"):
        geist.Model.load(_fixture(), engine=eng)
    eng.close()


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))


def _teacher_forced(path: Path, backend: str, prompt: list[int], forced: list[int] | None,
                    n_new: int, kv_mode: str) -> tuple[list[int], np.ndarray]:
    """Greedy ids (or `forced` fed instead) and the logits of every position."""
    eng = geist.Engine(backend=backend)
    with geist.Model.load(path, engine=eng) as m:
        s = m.session(max_seq_len=64, kv_mode=kv_mode)
        rows = list(s.eval(prompt))
        ids = []
        for i in range(n_new):
            ids.append(s.step(None if forced is None else forced[i]))
            rows.append(s.logits())
        s.close()
    eng.close()
    return ids, np.stack(rows)


PROMPT = [int(v) for v in np.random.default_rng(3).integers(1, 300, 8)]
# the vulkan backend's tolerance on lavapipe (tests/core/test_vulkan_forward.py): the same
# kernels, compiled without fast math; never measured on a Mac
RTOL = 2e-3


@pytest.mark.parametrize(("weight_type", "kv_mode"),
                         [("F32", "f32"), ("F16", "f16"), ("Q8_0", "f16"), ("Q4_0", "f16"),
                          ("Q4_1", "f32"), ("Q5_0", "f16"), ("Q4_K", "f16"), ("Q6_K", "f16"),
                          ("Q8_0", "int8")])
def test_forward_matches_cpu_scalar(weight_type: str, kv_mode: str) -> None:
    path = testing.fixture_path("llama", weight_type)
    ref_ids, ref = _teacher_forced(path, "cpu_scalar", PROMPT, None, 16, kv_mode)
    _, got = _teacher_forced(path, "metal", PROMPT, ref_ids, 16, kv_mode)
    assert [int(np.argmax(r)) for r in got[len(PROMPT) - 1:-1]] == ref_ids
    worst = max(_rel(a, b) for a, b in zip(ref, got, strict=True))
    assert worst < RTOL, worst
    free_ids, _ = _teacher_forced(path, "metal", PROMPT, None, 16, kv_mode)
    assert free_ids == ref_ids


def test_sessions_in_one_step_match_each_alone() -> None:
    prompts = [[int(v) for v in np.random.default_rng(10 + i).integers(1, 300, 3 + i)]
               for i in range(4)]
    eng = geist.Engine(backend="metal")
    with geist.Model.load(testing.fixture_path("llama", "Q8_0"), engine=eng) as m:
        alone = []
        for p in prompts:
            s = m.session(max_seq_len=48)
            alone.append(s.submit(p, max_tokens=8, temperature=0.0).result().ids)
            s.close()
        sessions = [m.session(max_seq_len=48) for _ in prompts]
        handles = [s.submit(p, max_tokens=8, temperature=0.0)
                   for s, p in zip(sessions, prompts, strict=True)]
        together = [h.result().ids for h in handles]
        for s in sessions:
            s.close()
    eng.close()
    assert together == alone and all(alone)


def test_session_refusals() -> None:
    eng = geist.Engine(backend="metal")
    with geist.Model.load(_fixture(), engine=eng) as m:
        for mode in ("int4", "kivi2"):
            with pytest.raises(GeistError, match=r"supported: 0 = F32, 1 = F16, 2 = INT8"):
                m.session(max_seq_len=32, kv_mode=mode)
        with pytest.raises(GeistError, match="shared prefix are not supported on the device"):
            m.session(max_seq_len=32, prefix=m.prefix(PROMPT))
    eng.close()


@pytest.mark.parametrize(("arch", "weight_type", "match"),
                         [("gemma3", "Q8_0", r"llama architecture only; this model is gemma3")])
def test_unsupported_models_are_refused(arch: str, weight_type: str, match: str) -> None:
    eng = geist.Engine(backend="metal")
    with geist.Model.load(testing.fixture_path(arch, weight_type), engine=eng) as m:
        with pytest.raises(GeistError, match=match):
            m.session(max_seq_len=32)
    eng.close()
