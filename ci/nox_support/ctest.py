"""Configure, build and run a CMake tier's own test suite with CTest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .env import MAX_JOBS, ROOT
from .tiers import TIERS


def run_ctest(
    session: nox.Session,
    name: str,
    build_dir: Path,
    *cmake_args: str,
    ctest_args=(),
    targets: tuple[str, ...] = (),
) -> None:
    """Build tier `name`'s CMake project in `build_dir`, its tests switched on
    (the tier's `cmake_args`) plus `cmake_args` (only `targets`, when given);
    run CTest with `ctest_args`."""
    tier = TIERS[name]
    session.run(
        "cmake",
        "-S",
        str(ROOT / tier.path),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        *tier.cmake_args,
        *cmake_args,
        external=True,
    )
    target_args = ["--target", *targets] if targets else []
    session.run("cmake", "--build", str(build_dir), "-j", MAX_JOBS, *target_args, external=True)
    # -j: the tests are independent processes (the SIMD-level and streaming runs among them).
    session.run(
        "ctest",
        "--test-dir",
        str(build_dir),
        "--output-on-failure",
        "-j",
        MAX_JOBS,
        *ctest_args,
        external=True,
    )
