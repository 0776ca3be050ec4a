"""The environment for a Python subprocess a test starts: this checkout's geist package first,
then the path the test process had (where its dependencies may live: on the GPU device machine
the kit's wheels sit on PYTHONPATH, and a child given only the checkout's path found no cffi)."""
from __future__ import annotations

import os
from pathlib import Path

import geist


def child_env() -> dict[str, str]:
    path = [str(Path(geist.__file__).parents[1])] + \
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
