"""The vulkan backend's device forward pass on lavapipe against cpu_scalar.

Every layer of a step runs on the device (native/src/backend/vulkan/vk_forward.c). Products with
quantized weights take 8-bit activations made on the device the way cpu_scalar makes them
(act_quant.h: f16 scale rounded to nearest even, round half away from zero) and sum the integer
block dots in cpu_scalar's canonical lane order; the norms carry their sum of squares in
float-float (cpu_scalar: double), attention and the SiLU follow kv.c's and vmath.c's plain
arithmetic (gt_vexp1's e^x, the same lane orders, no fused multiply-adds). On the quantized
fixtures the logits agree bit for bit; F32/F16 products sum in their own order (about 1e-6 and
5e-5 apart). The acceptance: the same greedy ids as cpu_scalar and logits within 2e-3 relative
(max |a - b| / max |a| per position) at every position.

The ICD is pinned as in test_vulkan.py; without lavapipe these tests skip and say why.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import geist
from geist import testing
from geist.errors import GeistError

_ICDS = [Path("/usr/share/vulkan/icd.d") / n for n in ("lvp_icd.json", "lvp_icd.x86_64.json")]
# GEIST_TEST_VULKAN_ICD (a test-harness variable, not geist's: the core reads no environment)
# pins another driver's ICD file instead, to run these tests once on a real GPU (the H200 run
# of the note); lavapipe otherwise.
_OTHER = os.environ.get("GEIST_TEST_VULKAN_ICD")
LVP = Path(_OTHER) if _OTHER else next((p for p in _ICDS if p.is_file()), None)
ROOT = Path(__file__).resolve().parents[2]
RTOL = 2e-3


def _skip_reason() -> str | None:
    if "vulkan" not in geist.backends_available().split(","):
        return "this build has no vulkan backend (no Vulkan headers or glslc at build time)"
    if ctypes.util.find_library("vulkan") is None:
        return "no Vulkan loader (libvulkan1) on this machine"
    if LVP is None:
        return "no lavapipe ICD (mesa-vulkan-drivers) on this machine"
    return None


_REASON = _skip_reason()


@pytest.fixture(autouse=True)
def _lavapipe(monkeypatch: pytest.MonkeyPatch) -> None:
    if _REASON is not None:
        pytest.skip(_REASON)
    monkeypatch.setenv("VK_ICD_FILENAMES", str(LVP))
    monkeypatch.setenv("VK_DRIVER_FILES", str(LVP))
    xdg = Path(tempfile.gettempdir()) / f"geist-xdg-{os.getuid()}"
    xdg.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))


def _teacher_forced(path: Path, backend: str, prompt: list[int], forced: list[int] | None,
                    n_new: int, kv_mode: str) -> tuple[list[int], np.ndarray]:
    """Greedy ids (or `forced` fed instead) and the logits of every position: the prompt's, then
    one row per new token."""
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


@pytest.mark.parametrize(("weight_type", "kv_mode"),
                         [("F32", "f32"), ("F16", "f16"), ("Q8_0", "f16"), ("Q8_0", "f32"),
                          ("Q4_0", "f16"), ("Q4_1", "f16"), ("Q5_0", "f16"), ("Q4_K", "f16"),
                          ("Q6_K", "f16"), ("Q8_0", "int8")])
def test_fixture_matches_cpu_scalar(weight_type: str, kv_mode: str) -> None:
    path = testing.fixture_path("llama", weight_type)
    ref_ids, ref = _teacher_forced(path, "cpu_scalar", PROMPT, None, 32, kv_mode)
    _, got = _teacher_forced(path, "vulkan", PROMPT, ref_ids, 32, kv_mode)
    # the device's own greedy choice at every position, fed the reference's ids
    assert [int(np.argmax(r)) for r in got[len(PROMPT) - 1:-1]] == ref_ids
    worst = max(_rel(a, b) for a, b in zip(ref, got, strict=True))
    print(f"{weight_type}/{kv_mode}: worst relative logit error {worst:.3g}")
    assert worst < RTOL, worst
    # and on its own (no forcing) the same 32 greedy ids
    free_ids, _ = _teacher_forced(path, "vulkan", PROMPT, None, 32, kv_mode)
    assert free_ids == ref_ids


def test_eight_sessions_in_one_step_match_each_alone() -> None:
    path = testing.fixture_path("llama", "Q4_1")
    prompts = [[int(v) for v in np.random.default_rng(10 + i).integers(1, 300, 3 + i)]
               for i in range(8)]
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(path, engine=eng) as m:
        alone = []
        for p in prompts:
            s = m.session(max_seq_len=48)
            alone.append(s.submit(p, max_tokens=12, temperature=0.0).result().ids)
            s.close()
        sessions = [m.session(max_seq_len=48) for _ in prompts]
        handles = [s.submit(p, max_tokens=12, temperature=0.0)
                   for s, p in zip(sessions, prompts, strict=True)]
        together = [h.result().ids for h in handles]
        for s in sessions:
            s.close()
    eng.close()
    assert together == alone
    assert all(len(ids) > 0 for ids in alone)


def test_decode_steps_replay_one_recording_with_fused_products() -> None:
    # vk_forward.c plans each pass as a list of dispatches and resubmits the last recording when
    # the list is unchanged (every decode step of one session); for decode rows the products make
    # their own 8-bit activations, the RMSNorms inside the products that read them, gate/up are
    # one product with the SiLU inside down's, the rotation inside Q and K: 8 dispatches and 6
    # barriers a layer, 3 more dispatches and 2 barriers for the embedding and the logits (their
    # exactness: test_fixture_matches_cpu_scalar)
    path = testing.fixture_path("llama", "Q4_1")
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(path, engine=eng) as m:
        n_layer = int(m.info["n_layer"])
        assert m.device_stats()["passes"] == 0
        s = m.session(max_seq_len=64)
        s.eval(PROMPT)
        s.step(None)  # the first decode pass: recorded
        before = m.device_stats()
        for _ in range(6):
            s.step(None)
        after = m.device_stats()
        s.close()
    eng.close()
    d = {k: after[k] - before[k] for k in after}
    assert d["passes"] == d["rows"] == d["logit_rows"] == 6, d
    assert d["recorded"] == 0, d
    assert d["dispatches"] == 6 * (8 * n_layer + 3), d
    assert d["barriers"] == 6 * (6 * n_layer + 2), d
    assert d["wait_ns"] > 0 and d["plan_ns"] > 0
    assert d["gpu_timed"] in (0, 6) and (d["gpu_ns"] > 0) == (d["gpu_timed"] > 0)
    # a host backend has no counters
    ec = geist.Engine(backend="cpu_scalar")
    with geist.Model.load(path, engine=ec) as mc:
        assert set(mc.device_stats().values()) == {0}
    ec.close()


def test_kv_modes_the_device_lacks_are_refused() -> None:
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(testing.fixture_path("llama", "Q8_0"), engine=eng) as m:
        for mode in ("int4", "kivi2"):
            with pytest.raises(GeistError, match=r"supported: 0 = F32, 1 = F16, 2 = INT8"):
                m.session(max_seq_len=32, kv_mode=mode)
    eng.close()


@pytest.mark.parametrize(("arch", "weight_type", "match"),
                         [("llama", "Q5_K", r"tensor .* is Q5_K"),
                          ("llama", "Q3_K", r"tensor .* is Q3_K"),
                          ("llama", "IQ4_XS", r"tensor .* is IQ4_XS"),
                          ("llama", "BF16", r"tensor .* is BF16"),
                          ("gemma3", "Q8_0", r"llama architecture only; this model is gemma3")])
def test_unsupported_models_are_refused(arch: str, weight_type: str, match: str) -> None:
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(testing.fixture_path(arch, weight_type), engine=eng) as m:
        with pytest.raises(GeistError, match=match):
            m.session(max_seq_len=32)
    eng.close()


@pytest.mark.parametrize("kv_mode", ["f16", "int8"])
def test_snapshot_restore_fork_truncate(kv_mode: str) -> None:
    path = testing.fixture_path("llama", "Q8_0")
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(path, engine=eng) as m:
        s = m.session(max_seq_len=48, kv_mode=kv_mode)
        s.prefill(PROMPT)
        image = s.snapshot()
        after = s.eval([5, 6, 7])
        # truncate: back to the prompt, the same tokens give the same logits
        s.truncate(len(PROMPT))
        assert np.array_equal(s.eval([5, 6, 7]), after)
        # restore into a fresh session, and fork it
        r = m.session(max_seq_len=48, kv_mode=kv_mode)
        r.restore(image)
        f = r.fork()
        assert np.array_equal(r.eval([5, 6, 7]), after)
        assert np.array_equal(f.eval([5, 6, 7]), after)
        for x in (s, r, f):
            x.close()
    eng.close()


@pytest.mark.parametrize(("family", "match"),
                         [("qwen2", r"llama architecture only; this model is qwen2"),
                          ("qwen3", r"llama architecture only; this model is qwen3"),
                          ("phi3", r"llama architecture only; this model is phi3"),
                          ("gemma2", r"llama architecture only; this model is gemma2"),
                          ("mistral", r"sliding-window layers are not on the device")])
def test_new_architectures_are_refused(family: str, match: str) -> None:
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(testing.family_fixture_path(family, "Q8_0"), engine=eng) as m:
        with pytest.raises(GeistError, match=match):
            m.session(max_seq_len=32)
    eng.close()


def test_llama3_rope_freqs_match_cpu_scalar() -> None:
    """Llama 3.x's rope_freqs divide the rotary frequencies in the model's table, which the
    device's rope reads as well."""
    path = testing.family_fixture_path("llama3", "Q8_0")
    ref_ids, ref = _teacher_forced(path, "cpu_scalar", PROMPT, None, 8, "f16")
    _, got = _teacher_forced(path, "vulkan", PROMPT, ref_ids, 8, "f16")
    assert [int(np.argmax(r)) for r in got[len(PROMPT) - 1:-1]] == ref_ids
    assert max(_rel(a, b) for a, b in zip(ref, got, strict=True)) < RTOL


def test_shared_prefix_is_refused() -> None:
    eng = geist.Engine(backend="vulkan")
    with geist.Model.load(testing.fixture_path("llama", "Q8_0"), engine=eng) as m:
        prefix = m.prefix(PROMPT)
        with pytest.raises(GeistError, match="shared prefix are not supported on the device"):
            m.session(max_seq_len=32, prefix=prefix)
        prefix.close()
    eng.close()


def test_shaders_translate_to_msl() -> None:
    """Every built shader through SPIRV-Cross's MSL backend (Metal / MoltenVK): no 64-bit
    atomics, no features MSL lacks."""
    tool = shutil.which("spirv-cross")
    if tool is None:
        pytest.skip("spirv-cross is not installed")
    spvs = sorted((ROOT / "build" / "release" / "shaders").glob("*.spv"))
    if not spvs:
        pytest.skip("no built shaders (scons variant=release)")
    for spv in spvs:
        res = subprocess.run([tool, "--msl", str(spv)], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, f"{spv.name}: {res.stderr}"


def _margin(row: np.ndarray) -> float:
    top2 = np.sort(row)[-2:]
    return float(top2[1] - top2[0])


@pytest.mark.slow
def test_smollm2_meets_the_acceptance() -> None:
    """The real model on the device, the first three reference prompts: the logits of every
    prompt position, then 16 greedy tokens. Against llama.cpp (every position whose ids so far
    are the reference's, so teacher-forced there): top-1 >= 97 % where its top-2 margin > 0.5,
    top-1 in its top-5 >= 99 %. Against cpu_scalar: the greedy ids depart only where
    cpu_scalar's own top-2 margin is < 0.5, the logits up to a departure within RTOL (measured:
    bit for bit with F16 KV since the shaders stopped trusting the driver's fma() and division,
    exact.glsl; before, 5e-2 apart and the ids parted). All eight prompts teacher-forced gave
    361 positions, 100 % / 100 % (268 with margin), but took 14 min on lavapipe."""
    from geist import models
    from tests.reference_data import reference_json

    try:
        path = Path(models.smollm2_path(install=False))
    except FileNotFoundError as e:
        pytest.skip(f"model not installed: {e}")
    ref = reference_json("smollm2")
    ev, ec = geist.Engine(backend="vulkan"), geist.Engine(backend="cpu_scalar")
    n = in_top5 = margin_n = margin_agree = 0
    worst = 0.0
    with geist.Model.load(path, engine=ev) as mv, geist.Model.load(path, engine=ec) as mc:
        for p in ref["prompts"][:3]:
            prompt = [int(v) for v in p["prompt_ids"]]
            runs = []
            for m in (mc, mv):
                s = m.session(max_seq_len=64, kv_mode="f16")
                rows = list(np.asarray(s.eval(prompt)))
                ids = []
                for _ in range(16):
                    ids.append(s.step(None))
                    rows.append(np.asarray(s.logits()))
                s.close()
                runs.append((ids, rows))
            (ref_ids, ref_rows), (ids, rows) = runs
            # teacher-forced against llama.cpp while the device's ids are the reference's
            forced = [int(v) for v in p["greedy_ids"]]
            same = next((i for i, (a, b) in enumerate(zip(forced, ids, strict=False)) if a != b),
                        len(ids))
            for pos in range(len(prompt) + same):
                topk = p["topk_per_position"][pos]
                cand = [int(t) for t, _ in topk]
                top = int(np.argmax(rows[pos]))
                n += 1
                in_top5 += top in cand[:5]
                if float(topk[0][1]) - float(topk[1][1]) > 0.5:
                    margin_n += 1
                    margin_agree += top == cand[0]
            # against cpu_scalar
            part = next((i for i, (a, b) in enumerate(zip(ref_ids, ids, strict=True)) if a != b),
                        None)
            upto = len(prompt) + (16 if part is None else part)
            worst = max([worst] + [_rel(a, b) for a, b in zip(ref_rows[:upto], rows[:upto],
                                                                 strict=True)])
            print(f"smollm2 {p['text'][:20]!r}: greedy parts from cpu_scalar at {part}")
            if part is not None:
                row = ref_rows[len(prompt) - 1 + part]
                assert _margin(row) < 0.5, (part, _margin(row))
    ev.close()
    ec.close()
    print(f"smollm2 vs llama.cpp: {n} positions, top-1 in top-5 {in_top5 / n:.3f}, top-1 "
          f"{margin_agree / margin_n:.3f} at {margin_n} with margin > 0.5; worst relative logit "
          f"error vs cpu_scalar {worst:.3g}")
    # measured 65 positions, 43 with margin (lavapipe and the H200 alike: the same bits); the
    # count stops where the device's greedy ids part from llama.cpp's
    assert n >= 60 and margin_n >= 40, (n, margin_n)
    assert margin_agree / margin_n >= 0.97
    assert in_top5 / n >= 0.99
    assert worst < RTOL, worst
