"""Configure, build and run core's GoogleTest suite with CMake and CTest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .env import MAX_JOBS, ROOT
from .tiers import TIERS


def run_core_ctest(
    session: nox.Session, build_dir: Path, *cmake_args: str, ctest_args=(), targets: tuple[str, ...] = ()
) -> None:
    """Build core's tests in `build_dir` with `cmake_args` (only `targets`,
    when given); run CTest with `ctest_args`."""
    core = ROOT / TIERS["core"].path
    session.run(
        "cmake",
        "-S",
        str(core),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        "-DTIERKIT_CORE_BUILD_TESTS=ON",
        *cmake_args,
        external=True,
    )
    target_args = ["--target", *targets] if targets else []
    session.run("cmake", "--build", str(build_dir), "-j", MAX_JOBS, *target_args, external=True)
    session.run("ctest", "--test-dir", str(build_dir), "--output-on-failure", *ctest_args, external=True)
