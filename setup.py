"""Builds the native core through SCons whenever the package is built or installed (also for
`pip install -e .`), so `import geist` always finds a matching libgeist.so."""

import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithSCons(build_py):
    def run(self) -> None:
        jobs = "-j2"
        subprocess.check_call([sys.executable, "-m", "SCons", jobs, "variant=release"], cwd=ROOT)
        super().run()


setup(cmdclass={"build_py": BuildWithSCons})
