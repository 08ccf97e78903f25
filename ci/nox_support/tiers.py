"""The tier table: every tier, declared once. Adding a tier is one entry here
plus its folder under packages/ (see docs/architecture.md)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

BASE = "ci/requirements-base.txt"
TORCH = "ci/requirements-torch.txt"
TORCH_OLDEST = "ci/requirements-torch-oldest.txt"
BENCH = "ci/requirements-bench.txt"
LINT = "ci/requirements-lint.txt"
FUZZ = "ci/requirements-fuzz.txt"


# What each wheel must do alone in a fresh venv (the build session).
SMOKE_CORE = """
import pathlib, tierkit_core
assert (pathlib.Path(tierkit_core.get_include()) / "tierkit" / "core.h").is_file()
assert (pathlib.Path(tierkit_core.get_cmake_dir()) / "tierkit_coreConfig.cmake").is_file()
print("tierkit_core", tierkit_core.__version__, "ok")
"""
SMOKE_COMMON = """
import tierkit_torch_common.build, tierkit_torch_common.fake
print("tierkit_torch_common", tierkit_torch_common.__version__, "ok")
"""
SMOKE_BRIDGE = """
import array, tierkit_bridge
a = array.array("f", [1.0, 2.0, 3.0])
assert memoryview(tierkit_bridge.add(a, a)).tolist() == [2.0, 4.0, 6.0]
print("tierkit_bridge", tierkit_bridge.__version__, "ok")
"""
SMOKE_TORCH = """
import torch, tierkit_torch
x = torch.linspace(-2, 2, 7)
torch.testing.assert_close(torch.ops.tierkit.scale_shift(x, 1.5, -0.25), x * 1.5 - 0.25, rtol=0, atol=0)
print("tierkit_torch", tierkit_torch.__version__, "on torch", torch.__version__, "ok")
"""
SMOKE_CUDA = """
import torch, tierkit_cuda
assert torch._C._dispatch_has_kernel_for_dispatch_key("tierkit::custom_add", "CUDA")
print("tierkit_cuda", tierkit_cuda.__version__, "on torch", torch.__version__, "ok")
"""
SMOKE_STABLE = """
import torch, tierkit_torch_stable
x = torch.linspace(-2, 2, 7)
torch.testing.assert_close(torch.ops.tierkit_stable.scale_shift(x, 1.5, -0.25), x * 1.5 - 0.25, rtol=0, atol=0)
print("tierkit_torch_stable", tierkit_torch_stable.__version__, "on torch", torch.__version__, "ok")
"""
SMOKE_TOOLS = """
import subprocess, sys, tierkit
subprocess.run([sys.executable, "-m", "tierkit", "doctor", "--help"], check=True, capture_output=True)
print("tierkit", tierkit.__version__, "ok")
"""


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
    module: str  # the import name: an installed tier's stamp is trusted only while this is found
    # "pytest": pytest <path>/tests; "ctest": its own CMake project's CTest suite,
    # then pytest <path>/tests/python where that exists (core: the installed wheel);
    # "stable-abi": one wheel, pytest under torch 2.14.1 (.nox/_env) and TORCH_OLDEST
    kind: str = "pytest"
    cmake_args: tuple[str, ...] = ()  # kind="ctest": the CMake definitions that switch its tests on
    needs: tuple[str, ...] = ()  # tiers installed before this one, in order
    requirements: tuple[str, ...] = (BASE,)
    cuda: bool = False  # needs a CUDA toolkit to build; skipped (with a message) without one
    bench: bool = True  # installed for the bench session
    sanitized: Sanitized | None = None
    # Its pytest runs on MAX_JOBS workers (pytest-xdist, a file per worker, so
    # module fixtures are built once): no test in it measures idle cores (the
    # bridge's GIL tests do, and skip on a busy machine), and its suite is
    # minutes of mostly one-threaded Python beside compiles.
    parallel_tests: bool = False
    # The build session: Python run in a fresh venv holding only the tier's
    # wheel and what it declares; whether that venv needs torch (linked, not
    # installed); the public build backends of its wheel's isolated build (empty:
    # the tier builds with --no-build-isolation, against the torch it runs on).
    smoke: str = ""
    runtime_torch: bool = False
    public_build_requires: tuple[str, ...] = ()
    # Tests (pytest -k names) the `tests` session, so CI, leaves out to keep
    # within its 30 minutes: they run in the tier's own session and in the
    # on-demand cells (tests-torch-next, tests-abi3-3.13), which test it whole.
    on_demand_tests: tuple[str, ...] = ()


TIERS: dict[str, Tier] = {
    t.name: t
    for t in [
        Tier(
            "core",
            "packages/cpp-core",
            "tierkit_core",
            kind="ctest",
            cmake_args=("-DTIERKIT_CORE_BUILD_TESTS=ON",),
            smoke=SMOKE_CORE,
            public_build_requires=("scikit-build-core>=1.1",),
        ),
        # torch is optional for the bridge; with it, the DLPack round trips run too.
        Tier(
            "bridge",
            "packages/pybind-bridge",
            "tierkit_bridge",
            needs=("core",),
            requirements=(BASE, TORCH),
            sanitized=Sanitized(
                pip_args=(
                    "--config-settings=cmake.define.TIERKIT_SANITIZE=address,undefined",
                    "--config-settings=cmake.build-type=RelWithDebInfo",
                ),
                canary="import tierkit_bridge._bridge as b; b._asan_canary()",
            ),
            smoke=SMOKE_BRIDGE,
            public_build_requires=("scikit-build-core>=1.1", "pybind11>=3.0"),
        ),
        # Pure Python: the torch tiers' shared helpers (build facts, fakes, faces).
        Tier(
            "common",
            "packages/torch-common",
            "tierkit_torch_common",
            needs=("core",),
            requirements=(BASE, TORCH),
            smoke=SMOKE_COMMON,
            public_build_requires=("hatchling>=1.27",),
        ),
        Tier(
            "torch",
            "packages/torch-cpu",
            "tierkit_torch",
            needs=("core", "common"),
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
                    # gloo process groups of 2-4 spawned ranks (~30 s of start-up under
                    # ASan) around the same kernels the other tests run instrumented.
                    "--ignore-glob=*test_distributed.py",
                ),
            ),
            smoke=SMOKE_TORCH,
            runtime_torch=True,
            parallel_tests=True,
            # A second compile of every torch-cpu source (~90 s here) through
            # torch.utils.cpp_extension.load, compared bit for bit with the wheel.
            on_demand_tests=("test_jit_build_matches_aot",),
        ),
        Tier(
            "cuda",
            "packages/torch-cuda",
            "tierkit_cuda",
            needs=("core", "common", "torch"),
            requirements=(BASE, TORCH),
            cuda=True,
            smoke=SMOKE_CUDA,
            runtime_torch=True,
        ),
        Tier(
            "stable",
            "packages/torch-stable",
            "tierkit_torch_stable",
            kind="stable-abi",
            needs=("core", "common"),
            requirements=(BASE, TORCH),
            smoke=SMOKE_STABLE,
            runtime_torch=True,
            parallel_tests=True,
        ),
        # Pure Python; imports whichever tiers are installed, lazily.
        Tier(
            "tools",
            "packages/tierkit",
            "tierkit",
            requirements=(BASE, TORCH, BENCH),
            smoke=SMOKE_TOOLS,
            public_build_requires=("hatchling>=1.27",),
            parallel_tests=True,
        ),
    ]
}

# The cross-tier tests in tests/ use these tiers (and run in parallel too).
CROSS_TIERS = ("core", "bridge", "common", "torch")


def parallel_pytest_args(py: str, per_file: bool = True) -> tuple[str, ...]:
    """pytest-xdist's arguments for a parallel suite under interpreter `py`:
    MAX_JOBS workers, each test file on one of them (`per_file`: its module
    fixtures are built once) or each test anywhere (a suite with one long
    file and no module fixtures, tests/); none where xdist is missing (an env
    made before it was a requirement) or MAX_JOBS is 1."""
    jobs = os.environ.get("MAX_JOBS", "2")
    found = subprocess.run([py, "-c", "import xdist"], capture_output=True).returncode == 0
    dist = "loadfile" if per_file else "load"
    return ("-n", jobs, "--dist", dist) if found and jobs != "1" else ()


def ci_selection(name: str) -> tuple[str, ...]:
    """pytest arguments that leave out `name`'s on-demand tests (none: all run)."""
    names = TIERS[name].on_demand_tests
    return ("-k", "not (" + " or ".join(names) + ")") if names else ()


def with_deps(name: str) -> list[str]:
    return [*TIERS[name].needs, name]


def requirements_for(names) -> list[str]:
    return sorted({r for n in names for r in TIERS[n].requirements})
