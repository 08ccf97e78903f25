"""The tier table: every tier, declared once. Adding a tier is one entry here
plus its folder under packages/ (see docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass

BASE = "ci/requirements-base.txt"
TORCH = "ci/requirements-torch.txt"
BENCH = "ci/requirements-bench.txt"
LINT = "ci/requirements-lint.txt"


@dataclass(frozen=True)
class Sanitized:
    """How a Python tier is built and tested under ASan+UBSan."""

    pip_args: tuple[str, ...]  # extra pip arguments for the instrumented build
    canary: str  # Python code that must die with an ASan report
    pytest_args: tuple[str, ...] = ()  # e.g. tests left out under ASan, with the reason in a comment


@dataclass(frozen=True)
class Tier:
    name: str  # session suffix: tests-<name>
    path: str  # source directory
    kind: str = "pytest"  # "pytest": pytest <path>/tests; "ctest": CMake + CTest (plus its Python check)
    needs: tuple[str, ...] = ()  # tiers installed before this one, in order
    requirements: tuple[str, ...] = (BASE,)
    cuda: bool = False  # needs a CUDA toolkit to build; skipped (with a message) without one
    bench: bool = True  # installed for the bench session
    sanitized: Sanitized | None = None


TIERS: dict[str, Tier] = {
    t.name: t
    for t in [
        Tier("core", "packages/cpp-core", kind="ctest"),
        # torch is optional for the bridge; with it, the DLPack round trips run too.
        Tier(
            "bridge",
            "packages/pybind-bridge",
            needs=("core",),
            requirements=(BASE, TORCH),
            sanitized=Sanitized(
                pip_args=(
                    "--config-settings=cmake.define.TIERKIT_SANITIZE=address,undefined",
                    "--config-settings=cmake.build-type=RelWithDebInfo",
                ),
                canary="import tierkit_bridge._bridge as b; b._asan_canary()",
            ),
        ),
        Tier(
            "torch",
            "packages/torch-cpu",
            needs=("core",),
            requirements=(BASE, TORCH),
            sanitized=Sanitized(
                pip_args=(),  # setup.py reads TIERKIT_SANITIZE
                canary="import tierkit_torch, torch; torch.ops.tierkit._asan_canary()",
                # torch.compile and JIT tests exercise inductor's and cpp_extension's
                # generated builds (uninstrumented), not our code, and would spawn
                # compilers under the ASan preload.
                pytest_args=(
                    "--ignore-glob=*test_compile.py",
                    "--ignore-glob=*test_jit.py",
                    "--ignore-glob=*test_deploy.py",  # AOTInductor compiles a model .so, cmake a runner
                ),
            ),
        ),
        Tier("cuda", "packages/torch-cuda", needs=("core", "torch"), requirements=(BASE, TORCH), cuda=True),
        # Pure Python; imports whichever tiers are installed, lazily.
        Tier("tools", "packages/tierkit", requirements=(BASE, TORCH, BENCH)),
    ]
}

# The cross-tier tests in tests/ use these tiers.
CROSS_TIERS = ("core", "bridge", "torch")


def with_deps(name: str) -> list[str]:
    return [*TIERS[name].needs, name]


def requirements_for(names) -> list[str]:
    return sorted({r for n in names for r in TIERS[n].requirements})
