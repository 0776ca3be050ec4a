"""The vulkan backend on lavapipe (Mesa's CPU Vulkan driver): device choice, weight import and
upload with the memory report, clean errors (no loader, no device, a device-memory cap below
the model, a refused import, sessions the device cannot run), and quant.comp's 8-bit activation
blocks against act_quant.c's.

The ICD is pinned through the Vulkan *loader's* own variables (VK_ICD_FILENAMES /
VK_DRIVER_FILES: the loader's configuration, not geist's; geist reads no environment). Without
lavapipe, or in a build without Vulkan headers, these tests skip and say why.
"""

from __future__ import annotations

import ctypes.util
import os
import tempfile
from pathlib import Path

import pytest

import geist
from geist import testing
from geist.errors import GeistError
from tests.child_env import child_env

_ICDS = [Path("/usr/share/vulkan/icd.d") / n for n in ("lvp_icd.json", "lvp_icd.x86_64.json")]
# GEIST_TEST_VULKAN_ICD (a test-harness variable, not geist's: the core reads no environment)
# pins another driver's ICD file instead, to run these tests once on a real GPU (the H200 run
# of the note); lavapipe otherwise.
_OTHER = os.environ.get("GEIST_TEST_VULKAN_ICD")
LVP = Path(_OTHER) if _OTHER else next((p for p in _ICDS if p.is_file()), None)
# the device name those tests expect (another ICD: whatever its first device is called)
NAME = "llvmpipe" if not _OTHER else None


def _skip_reason() -> str | None:
    if "vulkan" not in geist.backends_available().split(","):
        return "this build has no vulkan backend (no Vulkan headers or glslc at build time)"
    if ctypes.util.find_library("vulkan") is None:
        return "no Vulkan loader (libvulkan1) on this machine"
    if LVP is None:
        return "no lavapipe ICD (mesa-vulkan-drivers) on this machine"
    return None


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture(autouse=True)
def _lavapipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VK_ICD_FILENAMES", str(LVP))
    monkeypatch.setenv("VK_DRIVER_FILES", str(LVP))
    xdg = Path(tempfile.gettempdir()) / f"geist-xdg-{os.getuid()}"
    xdg.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))


def _fixture(weight_type: str = "Q8_0", arch: str = "llama") -> Path:
    return testing.fixture_path(arch, weight_type)


def test_engine_opens_lavapipe() -> None:
    eng = geist.Engine(backend="vulkan")
    assert eng.backend == "vulkan"
    name = NAME or eng.device
    assert name and name in eng.device
    eng.close()
    eng = geist.Engine(backend="vulkan", device="0")
    assert name in eng.device
    eng.close()
    eng = geist.Engine(backend="vulkan", device=name)
    assert name in eng.device
    eng.close()


def test_auto_stays_on_the_cpu() -> None:
    eng = geist.Engine()
    assert eng.backend != "vulkan" and eng.device == ""
    eng.close()


def test_bad_device_choice_names_the_devices() -> None:
    with pytest.raises(GeistError,
                       match=r"no device name contains 'no-such-gpu' \(devices: 0: "
                       + (NAME or "")):
        geist.Engine(backend="vulkan", device="no-such-gpu")
    with pytest.raises(GeistError, match="no device with index 7"):
        geist.Engine(backend="vulkan", device=7)


def test_no_loader_is_a_clear_error() -> None:
    with pytest.raises(GeistError, match="no Vulkan loader on this machine"):
        geist.Engine(backend="vulkan", vulkan_loader="/nonexistent/libvulkan.so.1")


def test_no_device_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "none.json"  # an ICD list that names no driver: the loader finds none
    monkeypatch.setenv("VK_ICD_FILENAMES", str(empty))
    monkeypatch.setenv("VK_DRIVER_FILES", str(empty))
    with pytest.raises(GeistError, match=r"found no (Vulkan 1\.2 driver|device)"):
        geist.Engine(backend="vulkan")


@pytest.mark.parametrize("how", ["memory", "file"])
def test_weights_imported_in_place(how: str) -> None:
    path = _fixture()
    eng = geist.Engine(backend="vulkan")
    if how == "file":
        model = geist.Model.load(path, engine=eng)
    else:
        model = geist.Model.from_buffer(path.read_bytes(), engine=eng)
    mem = model.memory()
    if how == "file" and NAME is None and mem["imported"] == 0:
        # a discrete GPU (the NVIDIA H200): a file's pages are uploaded, never imported
        # (docs/MEMORY.md)
        assert mem["device_local"] >= mem["weights_aliased"] == 0 and mem["device_local"] > 0
        model.close()
        eng.close()
        return
    # one copy of the weights: the caller's pages (or the file mapping), imported, none on the
    # device beside them
    assert mem["imported"] >= mem["weights_aliased"] > 0
    assert mem["device_local"] == 0 and mem["staging"] == 0 and mem["weights_owned"] == 0
    model.close()
    eng.close()


@pytest.mark.parametrize("weight_type", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
def test_weights_uploaded_when_import_is_refused(weight_type: str) -> None:
    path = _fixture(weight_type)
    eng = geist.Engine(backend="vulkan", no_import=True)
    model = geist.Model.load(path, engine=eng)
    mem = model.memory()
    assert mem["imported"] == 0 and mem["weights_aliased"] == 0 and mem["staging"] == 0
    # every tensor byte on the device, nothing left on the host
    assert mem["device_local"] >= path.stat().st_size // 2 > 0
    model.close()
    eng.close()


def test_device_memory_cap_below_the_model() -> None:
    path = _fixture()
    eng = geist.Engine(backend="vulkan", no_import=True, device_memory_limit=4096)
    with pytest.raises(GeistError, match="device_memory_limit"):
        geist.Model.load(path, engine=eng)
    # nothing was left allocated: the same engine loads it once the cap allows
    eng.close()
    eng = geist.Engine(backend="vulkan", no_import=True, device_memory_limit=1 << 30)
    model = geist.Model.load(path, engine=eng)
    assert model.memory()["device_local"] > 0
    model.close()
    eng.close()


def test_sessions_the_device_cannot_run_are_refused_with_a_clear_error() -> None:
    # the device forward pass runs llama, gemma3, qwen3 and phi3 (test_vulkan_forward.py);
    # gemma2 (soft-capping) is refused by name
    eng = geist.Engine(backend="vulkan")
    model = geist.Model.load(_fixture(arch="gemma2"), engine=eng)
    with pytest.raises(GeistError, match="architectures only; this model is gemma2"):
        model.session(max_seq_len=32)
    model.close()
    eng.close()


def test_cli_inspect_shows_the_device_and_the_memory_split() -> None:
    import json
    import subprocess
    import sys

    path = _fixture()
    res = subprocess.run([sys.executable, "-m", "geist.cli", "inspect", str(path), "--backend",
                          "vulkan", "--json"], capture_output=True, text=True, timeout=120,
                         env=child_env())
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["backend"] == "vulkan" and (NAME or "") in out["device"] and out["device"]
    split = out["split"]
    # the weights are on the device or read there in place; the host keeps its small tables
    assert split["device_local"] + split["imported"] >= path.stat().st_size // 2
    assert 0 < split["host_owned"] < path.stat().st_size // 10
    assert split["staging"] == 0
    res = subprocess.run([sys.executable, "-m", "geist.cli", "inspect", str(path), "--backend",
                          "vulkan"], capture_output=True, text=True, timeout=120,
                         env=child_env())
    assert res.returncode == 0 and "memory split (bytes): host_owned" in res.stdout, res.stderr


def _run_kernel_test(name: str) -> str:
    """A native kernel test (native/tests/NAME.c) on the pinned ICD: its output, checked ok."""
    import subprocess

    exe = Path(__file__).resolve().parents[2] / "build" / "release" / "tests" / name
    assert exe.is_file(), f"{exe} missing: run `scons variant=release` first"
    res = subprocess.run([str(exe), "run"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and f"{name}: ok" in res.stdout, res.stdout + res.stderr
    return res.stdout


def test_argmax_kernel_picks_the_samplers_greedy_id() -> None:
    # argmax.comp (a runtime greedy request's token picked on the device) against the sampler's
    # greedy rule: ties within a lane, across lanes and parts (the lowest id), +inf beside
    # FLT_MAX, NaN and -inf, no candidate at all (-1), -0 beside +0, vocabularies of 1,000 to
    # 600,001 ids (native/tests/test_vk_argmax.c)
    assert _run_kernel_test("test_vk_argmax").count("the CPU's ids") == 4


def test_quant_kernel_makes_the_cpus_8bit_blocks() -> None:
    # quant.comp (actq.glsl, which matvec.comp's in-product 8-bit rows run too: a word of 4
    # values a lane, a block's max by a reduction over lanes) against act_quant.c bit for bit, on
    # the cases that reduction must get right: +m and -m tied for the block of 256's largest
    # magnitude (the first in index order sets the scale's sign), zero and -0 blocks, halves, a
    # partial last workgroup; and the scales' divisions (exact.glsl's fdiv_rn) with their guesses
    # pushed off, so their integer corrections run on lavapipe, whose guesses are exact: 2
    # formats x 3 pipelines (native/tests/test_vk_actq.c)
    assert _run_kernel_test("test_vk_actq").count("the CPU's bits") == 6
