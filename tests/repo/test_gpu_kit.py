"""The GPU benchmark kit's scripts (tests/bench/gpu) run only on the device machine, so their
mistakes surface there, in scarce device time: here each shell script parses, and device.sh's
game-stash (which gathers Godot's parts over several calls) counts a part only when its sha256
matches the list pack_game.sh wrote, run on made-up parts under `--root` (no device needed)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2] / "tests" / "bench" / "gpu"


@pytest.mark.parametrize("script", sorted(p.name for p in KIT.glob("*.sh")))
def test_kit_shell_scripts_parse(script: str) -> None:
    r = subprocess.run(["bash", "-n", str(KIT / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _stash(root: Path, parts: Path) -> str:
    r = subprocess.run(["bash", str(KIT / "device.sh"), "--root", str(root), "game-stash",
                        str(parts)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="no sha256sum")
def test_game_stash_counts_parts_by_their_sha256(tmp_path: Path) -> None:
    sent = tmp_path / "pack"
    sent.mkdir()
    blobs = {f"godot.tar.xz.part-0{i}": bytes(range(i, 256)) * (i + 3) for i in range(3)}
    listing = "".join(f"{hashlib.sha256(b).hexdigest()}  {n}\n" for n, b in blobs.items())
    (sent / "godot.parts").write_text(listing)
    root = tmp_path / "root"
    # the first call carries two parts, one of them damaged on the way
    (sent / "godot.tar.xz.part-00").write_bytes(blobs["godot.tar.xz.part-00"])
    (sent / "godot.tar.xz.part-01").write_bytes(blobs["godot.tar.xz.part-01"][:-1] + b"!")
    assert "1 of 3 parts held" in _stash(root, sent)
    # the next call carries the rest again
    for name in ("godot.tar.xz.part-00", "godot.tar.xz.part-01"):
        (sent / name).unlink()
    (sent / "godot.tar.xz.part-01").write_bytes(blobs["godot.tar.xz.part-01"])
    (sent / "godot.tar.xz.part-02").write_bytes(blobs["godot.tar.xz.part-02"])
    assert "3 of 3 parts held" in _stash(root, sent)
    held = root / "opt" / "gpukit" / "game-parts"
    assert {p.name for p in held.glob("godot.tar.xz.part-*")} == set(blobs)


def test_game_stash_without_a_parts_list_says_so(tmp_path: Path) -> None:
    r = subprocess.run(["bash", str(KIT / "device.sh"), "--root", str(tmp_path / "root"),
                        "game-stash", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "no godot.parts" in r.stdout
