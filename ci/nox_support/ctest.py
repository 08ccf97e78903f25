"""Configure, build and run a CMake tier's own test suite with CTest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from . import prebuild
from .env import MAX_JOBS, ROOT
from .tiers import TIERS


def build_steps(name: str, build_dir: Path, *cmake_args: str, targets: tuple[str, ...] = ()) -> list:
    """Configure and build tier `name`'s CMake project in `build_dir`, its
    tests switched on (the tier's `cmake_args`) plus `cmake_args` (only
    `targets`, when given): the commands (argv, environment added), so
    prebuild.py can run them early."""
    tier = TIERS[name]
    configure = ["cmake", "-S", str(ROOT / tier.path), "-B", str(build_dir), "-G", "Ninja"]
    target_args = ["--target", *targets] if targets else []
    return [
        ([*configure, *tier.cmake_args, *cmake_args], {}),
        (["cmake", "--build", str(build_dir), "-j", MAX_JOBS, *target_args], {}),
    ]


def run_ctest(
    session: nox.Session,
    name: str,
    build_dir: Path,
    *cmake_args: str,
    ctest_args=(),
    targets: tuple[str, ...] = (),
) -> None:
    """build_steps' build (after the same build's background run, when
    prebuild.py has one: then ninja finds it done), then CTest with `ctest_args`."""
    prebuild.wait(session, build_dir.name)
    for argv, env in build_steps(name, build_dir, *cmake_args, targets=targets):
        session.run(*argv, external=True, env=env)
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
