"""Configure, build and run a CMake tier's own test suite with CTest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from . import compiler_cache, prebuild
from .env import MAX_JOBS, ROOT
from .tiers import TIERS


class CTestBuild(NamedTuple):
    """One CMake test build of a tier: where, its CMake definitions (beyond
    the tier's own `cmake_args`, which switch its tests on), its targets (all
    when empty), the variables its commands add to the environment."""

    build_dir: Path
    cmake_args: tuple[str, ...]
    targets: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def steps(self, name: str) -> list[prebuild.Step]:
        """Configure and build it for tier `name`: the commands, so that
        prebuild.py can run them early."""
        tier = TIERS[name]
        configure = ["cmake", "-S", str(ROOT / tier.path), "-B", str(self.build_dir), "-G", "Ninja"]
        target_args = ["--target", *self.targets] if self.targets else []
        return [
            ([*configure, *tier.cmake_args, *self.cmake_args, *compiler_cache.cmake_args()], dict(self.env)),
            (["cmake", "--build", str(self.build_dir), "-j", MAX_JOBS, *target_args], dict(self.env)),
        ]


def run_ctest(session: nox.Session, name: str, build: CTestBuild, ctest_args=()) -> None:
    """`build` (after its background run, when prebuild.py has one), then CTest with `ctest_args`."""
    prebuild.run_after(session, build.build_dir.name, build.steps(name))
    # -j: the tests are independent processes (the SIMD-level and streaming runs among them).
    session.run(
        "ctest",
        "--test-dir",
        str(build.build_dir),
        "--output-on-failure",
        "-j",
        MAX_JOBS,
        *ctest_args,
        external=True,
    )
