"""tierkit's sessions, in dependency order (names are part of the interface).

Every Python-facing session shares one virtual environment, ``.nox/_env``,
created once and reused: torch alone is 1-5.5 GB and must not be installed per
session. Its requirements live in ``ci/requirements-*.txt``; a stamp file
holding their hash makes re-runs skip pip entirely.

Adding a tier is adding one ``Tier`` to ``TIERS`` (and its tests session, if
it needs more than ``pytest <tier>/tests``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
NOX_DIR = ROOT / ".nox"
ENV_DIR = NOX_DIR / "_env"
BUILD_DIR = ROOT / "build"
DIST_DIR = ROOT / "dist"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "none"
nox.options.error_on_external_run = False

BUILD_ENV = {
    "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
    "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get("MAX_JOBS", "2"),
    "CMAKE_GENERATOR": "Ninja",
    "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0"),
    "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda"),
}


@dataclass(frozen=True)
class Tier:
    name: str  # session suffix: tests-<name>
    path: str  # source directory
    needs: tuple[str, ...] = ()  # tiers installed before this one, in order
    requirements: tuple[str, ...] = ("ci/requirements-base.txt",)
    pytest_args: tuple[str, ...] = field(default_factory=tuple)


TIERS: dict[str, Tier] = {
    t.name: t
    for t in [
        Tier("core", "packages/cpp-core"),
    ]
}


# ---- the shared environment -------------------------------------------------


def _env_python() -> str:
    return str(ENV_DIR / "bin" / "python")


def shared_env(session: nox.Session, *requirement_files: str) -> str:
    """Create/refresh .nox/_env with the given requirement files; return its python."""
    files = sorted(set(requirement_files))
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        digest.update((ROOT / name).read_bytes())
    stamp_dir = ENV_DIR / ".tierkit-stamps"
    stamp = stamp_dir / digest.hexdigest()
    if not (ENV_DIR / "bin" / "python").exists():
        session.run(BASE_PYTHON, "-m", "venv", str(ENV_DIR), external=True)
        session.run(_env_python(), "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
    if not stamp.exists():
        args = []
        for name in files:
            args += ["-r", str(ROOT / name)]
        session.run(_env_python(), "-m", "pip", "install", "-q", *args, external=True)
        stamp_dir.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    return _env_python()


def install_tiers(session: nox.Session, python: str, names: list[str], extra_env=None, target=None) -> None:
    """pip-install tiers in order, building against what the env already holds."""
    for name in names:
        args = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--force-reinstall"]
        if target:
            args += ["--target", str(target), "--upgrade"]
        session.run(*args, str(ROOT / TIERS[name].path), external=True, env={**BUILD_ENV, **(extra_env or {})})


def with_deps(name: str) -> list[str]:
    return [*TIERS[name].needs, name]


def requirements_for(names: list[str]) -> list[str]:
    return sorted({r for n in names for r in TIERS[n].requirements})


# ---- core's C++ tests --------------------------------------------------------


def ctest_core(session: nox.Session, build_dir: Path, *cmake_args: str, ctest_args=()) -> None:
    core = ROOT / TIERS["core"].path
    session.run(
        "cmake", "-S", str(core), "-B", str(build_dir), "-G", "Ninja",
        "-DTIERKIT_CORE_BUILD_TESTS=ON", *cmake_args, external=True,
    )
    session.run("cmake", "--build", str(build_dir), "-j", BUILD_ENV["MAX_JOBS"], external=True)
    session.run("ctest", "--test-dir", str(build_dir), "--output-on-failure", *ctest_args, external=True)


@nox.session(name="tests-core")
def tests_core(session: nox.Session) -> None:
    """Build and run core's GoogleTest suite (CTest), then check the installed wheel."""
    ctest_core(session, BUILD_DIR / "core-tests", "-DCMAKE_BUILD_TYPE=Release")
    python = shared_env(session, *requirements_for(["core"]))
    install_tiers(session, python, ["core"])
    session.run(python, "-m", "pytest", "-q", str(ROOT / "packages/cpp-core/tests/python"), external=True)


# ---- everything else ----------------------------------------------------------

TEST_SESSIONS = ["tests-core"]


@nox.session
def tests(session: nox.Session) -> None:
    """Every test that runs on this machine, tier by tier in dependency order."""
    for name in TEST_SESSIONS:
        session.notify(name)


@nox.session
def sanitize(session: nox.Session) -> None:
    """ASan+UBSan (and TSan for the threaded parts) over core; canaries must be caught."""
    ctest_core(
        session, BUILD_DIR / "core-asan", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DTIERKIT_SANITIZE=address,undefined",
    )
    ctest_core(
        session, BUILD_DIR / "core-tsan", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DTIERKIT_SANITIZE=thread",
        ctest_args=("-R", "CachingAllocator|ThreadPool|Kernels|canary"),
    )


@nox.session
def build(session: nox.Session) -> None:
    """Wheels for every tier, in dependency order, into dist/."""
    python = shared_env(session, *requirements_for(list(TIERS)))
    DIST_DIR.mkdir(exist_ok=True)
    for name in TIERS:
        session.run(
            python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(DIST_DIR),
            str(ROOT / TIERS[name].path), external=True, env=BUILD_ENV,
        )
        install_tiers(session, python, [name])
    session.log("wheels: " + ", ".join(sorted(p.name for p in DIST_DIR.glob("*.whl"))))


@nox.session
def demo(session: nox.Session) -> None:
    """Build every tier and run its demo: the README's main job."""
    python = shared_env(session, *requirements_for(list(TIERS)))
    install_tiers(session, python, list(TIERS))
    cmake_dir = subprocess.check_output([python, "-m", "tierkit_core", "--cmakedir"], text=True).strip()
    demo_build = BUILD_DIR / "core-demo"
    session.run(
        "cmake", "-S", str(ROOT / "packages/cpp-core/examples/consumer"), "-B", str(demo_build),
        f"-Dtierkit_core_DIR={cmake_dir}", external=True,
    )
    session.run("cmake", "--build", str(demo_build), external=True)
    session.run(str(demo_build / "consumer"), external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over all Python, clang-format --dry-run over all C++/CUDA."""
    python = shared_env(session, "ci/requirements-base.txt", "ci/requirements-lint.txt")
    bindir = Path(python).parent
    session.run(str(bindir / "ruff"), "check", str(ROOT), external=True)
    session.run(str(bindir / "ruff"), "format", "--check", str(ROOT), external=True)
    sources = [
        str(p)
        for ext in ("*.h", "*.cpp", "*.cu", "*.cuh")
        for p in (ROOT / "packages").rglob(ext)
        if "build" not in p.parts
    ]
    session.run(str(bindir / "clang-format"), "--dry-run", "--Werror", *sources, external=True)
