"""`geist plan`: metadata-only sizing agrees with memory() and with measured RSS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import geist
from geist import cli, plan, testing
from tests.memory_isolated import run_isolated
from tests.memory_utils import pin_malloc_thresholds, rss_bytes


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("mode", plan.KV_MODES)
def test_plan_matches_session_memory(tmp_path: Path, arch: str, mode: str) -> None:
    path = testing.build_fixture(tmp_path / f"{arch}.gguf", arch=arch, seed=2)
    p = plan.make_plan(path, npcs=3, max_seq_len=100, kv_mode=mode, prefix_tokens=0)
    with geist.Model.load(path) as m:
        with m.session(max_seq_len=100, kv_mode=mode) as s:
            mem = s.memory()
            assert p["per_session"]["kv_cache"] == mem["kv_cache"]
            assert p["per_session"]["scratch"] == mem["scratch"]
            assert p["per_session"]["other"] == mem["other"]
        assert p["sessions_bytes"] == 3 * p["per_session"]["total"]
        owned = m.memory()["total_owned"]
        assert abs(p["model_owned_estimate"] - owned) < 0.5 * owned + 100_000


def test_plan_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = testing.build_fixture(tmp_path / "g.gguf", arch="gemma3", seed=2)
    assert cli.main(["plan", str(path), "--npcs", "4", "--max-seq-len", "64", "--kv-mode",
                     "int8", "--prefix-tokens", "16", "--budget-gib", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["npcs"] == 4 and out["kv_mode"] == "int8" and out["npcs_that_fit"] > 100
    assert out["shared_prefix_bytes"] > 0
    assert cli.main(["plan", str(path), "--npcs", "4", "--kv-mode", "kivi2"]) == 0
    assert "4 NPCs" in capsys.readouterr().out


@pytest.mark.slow
def test_plan_agrees_with_rss_for_32_gemma_npcs(gemma3_path: Path) -> None:
    # planned here, before and outside the process that loads the model (metadata only)
    p = plan.make_plan(gemma3_path, npcs=32, max_seq_len=256, kv_mode="int8")
    run_isolated(__name__, "plan_agrees_with_rss", str(gemma3_path), p["sessions_bytes"])


def plan_agrees_with_rss(gemma3_path: str, sessions_bytes: int) -> None:
    pin_malloc_thresholds()
    p = {"sessions_bytes": sessions_bytes}
    with geist.Model.load(gemma3_path) as m:
        with m.session(max_seq_len=16, kv_mode="int8") as warm:
            warm.prefill([2, 818])
        before = rss_bytes()
        sessions = [m.session(max_seq_len=256, kv_mode="int8") for _ in range(32)]
        measured = rss_bytes() - before
        print(f"plan: {p['sessions_bytes'] / 2**20:.2f} MiB for 32 NPCs (int8, cap 256); "
              f"measured RSS {measured / 2**20:.2f} MiB")
        assert abs(measured - p["sessions_bytes"]) <= 0.10 * p["sessions_bytes"]
        for s in sessions:
            s.close()
