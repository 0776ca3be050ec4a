"""Test setup: which native build to test, and the real models' paths.

`pytest --native=asan` runs the suite against build/asan/libgeist.so (run it through
scripts/pytest_asan.sh, which preloads the sanitizer runtimes); the default is the release build.
`pytest --sweep` also runs the tests marked `sweep`: longer versions of CI's checks (more positions
or tokens over the same code), skipped otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--native",
        default="release",
        help="native build to test: release, debug, asan, or a path to libgeist.so",
    )
    parser.addoption(
        "--sweep",
        action="store_true",
        help="also run the long sweeps (@pytest.mark.sweep) that CI's suite skips",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--sweep"):
        return
    skip = pytest.mark.skip(reason="a long sweep: run with --sweep")
    for item in items:
        if item.get_closest_marker("sweep") is not None:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    from geist import _binding

    choice = config.getoption("--native")
    path = Path(choice) if "/" in choice else REPO / "build" / choice / "libgeist.so"
    if choice == "release" and not path.is_file():
        return  # fall back to the installed copy next to the package
    _binding.load_library(path)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    from geist import models

    return models.smollm2_path()


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    from geist import models

    return models.gemma3_path()


@pytest.fixture(scope="session")
def real_model_path(request: pytest.FixtureRequest) -> Path:
    from geist import models

    return models.get(request.param)
