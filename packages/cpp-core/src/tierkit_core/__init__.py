"""Locations of tierkit's C++ core headers and CMake package config.

Like ``pybind11.get_include()``: this module holds no code of its own, it only
tells build systems where the installed core lives.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path

__all__ = ["__version__", "cxx_flags", "get_cmake_dir", "get_include"]
__version__ = _metadata.version("tierkit-core")  # one source: the repository's VERSION

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


# What every consumer must compile core's headers with; CMake consumers get the
# same list from the tierkit::core target (CMakeLists.txt, a test keeps them equal).
CXX_FLAGS = (
    # `omp simd` in kernels.h vectorizes at -O2 only with it (no OpenMP runtime).
    "-fopenmp-simd",
    # No a*b+c -> fma contraction (GCC's default in gnu++ modes, and on hosts
    # with FMA: aarch64, -march=native): results must be bit-identical to eager
    # torch, which rounds the product and the sum separately.
    "-ffp-contract=off",
    # The row kernels pass GCC vectors between always-inline functions that
    # carry no target attribute (row_kernels.h); GCC notes that their ABI
    # would differ without AVX, which never applies to an inlined call.
    "-Wno-psabi",
)


def cxx_flags() -> list[str]:
    """Compiler flags for code that includes core's headers (GCC/Clang)."""
    return list(CXX_FLAGS)


def get_cmake_dir() -> str:
    """Directory holding ``tierkit_coreConfig.cmake`` (pass as ``tierkit_core_DIR``)."""
    return _existing(_HERE / "share" / "cmake" / "tierkit_core", "CMake package config")
