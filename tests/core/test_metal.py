"""The metal backend on a Mac (Darwin only; everywhere else these tests skip and say why).

NOT RUN IN THIS REPOSITORY'S OWN CI: they run on the macos-14 runner of
.github/workflows/macos.yml, for users of the repository. What runs everywhere instead: the buffer
planner and the KV layout (native/tests/test_metal_planner.c) and the kernels' MSL translation
(tests/core/test_msl.py).

On a Mac they check the device interface of native/src/backend/metal/metal.m: the engine opens
the default device; read-only bytes (load_from_memory of a read-only mapping, and load(path)) are
wrapped in place, owning 0 weight bytes; GEIST_DEVICE_NO_IMPORT copies and counts them; the
device-memory cap; a session's KV allocated on the device; and the forward pass, not written yet,
refused with a clear error.
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

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
    # one copy of the weights: the caller's pages (or the file mapping) under NoCopy views
    assert mem["weights_owned"] == 0 and mem["device_local"] == 0
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


def test_session_kv_and_the_missing_forward_pass() -> None:
    eng = geist.Engine(backend="metal")
    with geist.Model.load(_fixture(), engine=eng) as m:
        s = m.session(max_seq_len=64, kv_mode="f16")  # the KV buffer on the device
        with pytest.raises(GeistError, match="forward pass is not written yet"):
            s.eval([1, 2, 3])
        s.close()
        for mode in ("int4", "int8", "kivi2"):
            with pytest.raises(GeistError, match=r"supported: 0 = F32, 1 = F16"):
                m.session(max_seq_len=32, kv_mode=mode)
    eng.close()
