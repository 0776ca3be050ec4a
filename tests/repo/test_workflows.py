"""The macOS workflow (.github/workflows/macos.yml) is valid YAML with the steps it promises: the
build tools from Homebrew and SCons from pip, the core built with the Metal backend, the Godot
addon's macOS binary that geist.gdextension names, the C tests, the Metal tests and the suite.

The workflow itself runs on GitHub's macos-14 runners for users of the repository; it has not run
in this repository's own CI (Linux). This test only reads the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML: the test extra of pyproject.toml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "macos.yml"
GDEXT = ROOT / "addons" / "geist" / "geist.gdextension"


def _load() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _steps() -> list[dict[str, Any]]:
    jobs = _load()["jobs"]
    assert len(jobs) == 1
    (job,) = jobs.values()
    return list(job["steps"])


def _runs() -> list[str]:
    return [str(s.get("run", "")) for s in _steps()]


def _step_with(pattern: str) -> int:
    """Index of the first step whose run script matches `pattern`."""
    for i, run in enumerate(_runs()):
        if re.search(pattern, run):
            return i
    raise AssertionError(f"no step runs {pattern!r}")


def test_triggers_and_runner() -> None:
    doc = _load()
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == "macos-14"  # arm64 (Apple silicon)


def test_every_step_is_named_or_an_action() -> None:
    for s in _steps():
        assert "uses" in s or ("name" in s and "run" in s), s


def test_build_tools_from_homebrew_and_scons_from_pip() -> None:
    brew = _runs()[_step_with(r"brew install")]
    assert "spirv-cross" in brew
    assert re.search(r"\b(shaderc|glslang)\b", brew), "no glslc provider"
    _step_with(r"pip install .*scons")
    _step_with(r'pip install -e "\.\[test\]"')


def test_builds_everything_in_order() -> None:
    core = _step_with(r"SCons .*variant=release")
    assert "mtl_msl.c" in _runs()[core]  # the Metal backend is in
    godot = _step_with(r"SCons .*godot=1")
    c_tests = _step_with(r"build/asan/tests/test_\*")
    metal = _step_with(r"pytest .*tests/core/test_metal\.py")
    suite = _step_with(r"pytest -q -rs -m \"not slow\"$")
    assert core < godot < c_tests and core < metal < suite
    assert "variant=release,asan" in _runs()[core]


def test_the_godot_binary_is_the_one_geist_gdextension_names() -> None:
    mac = {k: v for k, v in (ln.split("=", 1) for ln in GDEXT.read_text().splitlines()
                             if ln.startswith("macos.") and "=" in ln)}
    assert {k.strip() for k in mac} == {"macos.debug", "macos.release"}
    paths = {v.strip().strip('"').removeprefix("res://") for v in mac.values()}
    assert len(paths) == 1
    run = _runs()[_step_with(r"SCons .*godot=1")]
    assert f"test -f {paths.pop()}" in run


def test_named_test_files_exist() -> None:
    for run in _runs():
        for path in re.findall(r"\btests/[\w/]+\.py\b", run):
            assert (ROOT / path).is_file(), path
