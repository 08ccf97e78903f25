"""Locations of tierkit's C++ core headers and CMake package config.

Like ``pybind11.get_include()``: this module holds no code of its own, it only
tells build systems where the installed core lives.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "get_cmake_dir", "get_include"]
__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent


def _existing(path: Path, what: str) -> str:
    if not path.is_dir():
        raise FileNotFoundError(
            f"tierkit_core: {what} not found at {path}; reinstall with `pip install packages/cpp-core`"
        )
    return str(path)


def get_include() -> str:
    """Directory to add to the include path; it contains ``tierkit/core.h``."""
    return _existing(_HERE / "include", "headers")


def get_cmake_dir() -> str:
    """Directory holding ``tierkit_coreConfig.cmake`` (pass as ``tierkit_core_DIR``)."""
    return _existing(_HERE / "share" / "cmake" / "tierkit_core", "CMake package config")
