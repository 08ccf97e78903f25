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
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
}
# The toolkit root, not a wrapper nvcc's directory (see docs/torch-cuda.md).
_cuda_home = os.environ.get("CUDA_HOME") or (
    "/usr/local/cuda" if Path("/usr/local/cuda/bin/nvcc").exists() else ""
)
if _cuda_home:
    BUILD_ENV["CUDA_HOME"] = _cuda_home


@dataclass(frozen=True)
class Tier:
    name: str  # session suffix: tests-<name>
    path: str  # source directory
    needs: tuple[str, ...] = ()  # tiers installed before this one, in order
    requirements: tuple[str, ...] = ()


BASE = "ci/requirements-base.txt"
TORCH = "ci/requirements-torch.txt"

TIERS: dict[str, Tier] = {
    t.name: t
    for t in [
        Tier("core", "packages/cpp-core", requirements=(BASE,)),
        # torch is optional for the bridge; with it, the DLPack round trips run too.
        Tier("bridge", "packages/pybind-bridge", needs=("core",), requirements=(BASE, TORCH)),
        Tier("torch", "packages/torch-cpu", needs=("core",), requirements=(BASE, TORCH)),
        Tier("cuda", "packages/torch-cuda", needs=("core", "torch"), requirements=(BASE, TORCH)),
        # Pure Python; imports whichever tiers are installed, lazily.
        Tier("tools", "packages/tierkit", requirements=(BASE, TORCH, "ci/requirements-bench.txt")),
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


SKIP_PARTS = {"build", "__pycache__", ".pytest_cache", "dist"}


def tier_digest(name: str) -> str:
    """Hash of a tier's sources and of the tiers it builds on."""
    digest = hashlib.sha256()
    for dep in TIERS[name].needs:
        digest.update(tier_digest(dep).encode())
    root = ROOT / TIERS[name].path
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (
            path.is_file()
            and not SKIP_PARTS.intersection(rel.parts)
            and not rel.parts[0].endswith(".egg-info")
        ):
            digest.update(str(rel).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def install_tiers(session: nox.Session, python: str, names: list[str]) -> None:
    """pip-install tiers in order, building against what the env already holds.

    A tier whose sources (and dependencies) are unchanged since its last
    install is skipped: reinstalling would rewrite core's headers with new
    mtimes and make every tier above rebuild from scratch.
    """
    stamps = ENV_DIR / ".tierkit-stamps"
    for name in names:
        stamp = stamps / f"{name}-{tier_digest(name)}"
        if stamp.exists():
            session.log(f"{name}: installed and up to date")
            continue
        session.run(
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
            str(ROOT / TIERS[name].path),
            external=True,
            env=BUILD_ENV,
        )
        for old in stamps.glob(f"{name}-*"):
            old.unlink()
        stamps.mkdir(parents=True, exist_ok=True)
        stamp.touch()


def with_deps(name: str) -> list[str]:
    return [*TIERS[name].needs, name]


def requirements_for(names: list[str]) -> list[str]:
    return sorted({r for n in names for r in TIERS[n].requirements})


# ---- core's C++ tests --------------------------------------------------------


def ctest_core(session: nox.Session, build_dir: Path, *cmake_args: str, ctest_args=()) -> None:
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
    session.run("cmake", "--build", str(build_dir), "-j", BUILD_ENV["MAX_JOBS"], external=True)
    session.run("ctest", "--test-dir", str(build_dir), "--output-on-failure", *ctest_args, external=True)


@nox.session(name="tests-core")
def tests_core(session: nox.Session) -> None:
    """Build and run core's GoogleTest suite (CTest), then check the installed wheel."""
    ctest_core(session, BUILD_DIR / "core-tests", "-DCMAKE_BUILD_TYPE=Release")
    python = shared_env(session, *requirements_for(["core"]))
    install_tiers(session, python, ["core"])
    session.run(python, "-m", "pytest", "-q", str(ROOT / "packages/cpp-core/tests/python"), external=True)


# ---- each Python tier's pytest ------------------------------------------------


def pytest_tier(session: nox.Session, name: str) -> None:
    names = with_deps(name)
    python = shared_env(session, *requirements_for(names))
    install_tiers(session, python, names)
    session.run(
        python,
        "-m",
        "pytest",
        "-q",
        "-rs",
        str(ROOT / TIERS[name].path / "tests"),
        *session.posargs,
        external=True,
        env={**BUILD_ENV, "TIERKIT_JIT_BUILD_DIR": str(BUILD_DIR / f"jit-{name}")},
    )


def test_tier(session: nox.Session, name: str) -> None:
    if name == "core":
        tests_core(session)
    elif name == "cuda" and not Path(BUILD_ENV.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc").exists():
        session.warn("tests-cuda skipped: no CUDA toolkit (set CUDA_HOME to the directory holding bin/nvcc)")
    else:
        pytest_tier(session, name)


def _register_tests_session(name: str) -> None:
    @nox.session(name=f"tests-{name}")
    def _tests(session: nox.Session) -> None:
        test_tier(session, name)

    _tests.__doc__ = f"Install {TIERS[name].path} and what it needs, run its pytest."


for _name in TIERS:
    if _name != "core":
        _register_tests_session(_name)

# ---- everything else ----------------------------------------------------------


CROSS_TIERS = ["core", "bridge", "torch"]


def cross_tier_tests(session: nox.Session, *pytest_args: str, env: dict | None = None) -> None:
    python = shared_env(session, *requirements_for(CROSS_TIERS))
    install_tiers(session, python, CROSS_TIERS)
    session.run(
        python, "-m", "pytest", "-q", "-rs", str(ROOT / "tests"), *pytest_args, external=True, env=env
    )


@nox.session(name="tests-cross")
def tests_cross(session: nox.Session) -> None:
    """Cross-tier tests (tests/): journeys, properties, bad inputs, soaks.

    `-- --hypothesis-profile=soak` for >= 2000 examples per op."""
    cross_tier_tests(session, *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Every test that runs on this machine, tier by tier in dependency order.

    Runs the tiers' test sessions inline (not via notify, which would queue
    them after any session named after `tests` on the command line)."""
    for name in TIERS:
        session.log(f"==== tests-{name}")
        test_tier(session, name)
    session.log("==== tests-cross")
    cross_tier_tests(session)


ASAN_SITE = BUILD_DIR / "asan-site"
ASAN_LOGS = BUILD_DIR / "asan-logs"


def asan_env(python: str) -> dict[str, str]:
    """Environment for running Python extensions built with ASan+UBSan.

    libasan must be the first library loaded, so it is preloaded, with
    libstdc++ right after it: python itself does not link libstdc++, and ASan's
    __cxa_throw interceptor finds no real function to forward to (a CHECK
    failure on the first C++ exception) unless it is there at start-up. Python's own
    allocations look like leaks to LSan, hence detect_leaks=0 (the C++ tests
    keep leak checking on). Reports go to files so pytest cannot swallow them.
    """
    libs = [
        subprocess.check_output(["g++", f"-print-file-name={lib}"], text=True).strip()
        for lib in ("libasan.so", "libstdc++.so")
    ]
    return {
        "LD_PRELOAD": " ".join(libs),
        "ASAN_OPTIONS": f"detect_leaks=0:allocator_may_return_null=1:log_path={ASAN_LOGS}/asan",
        "UBSAN_OPTIONS": f"print_stacktrace=1:halt_on_error=1:log_path={ASAN_LOGS}/ubsan",
        "PYTHONPATH": str(ASAN_SITE),
    }


def install_sanitized(session: nox.Session, python: str, name: str) -> None:
    """Build `name` with ASan+UBSan into build/asan-site (the normal install stays untouched)."""
    settings = {
        "bridge": [
            "--config-settings=cmake.define.TIERKIT_SANITIZE=address,undefined",
            "--config-settings=cmake.build-type=RelWithDebInfo",
        ],
        "torch": [],  # setup.py reads TIERKIT_SANITIZE
    }[name]
    session.run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--upgrade",
        "--target",
        str(ASAN_SITE),
        *settings,
        str(ROOT / TIERS[name].path),
        external=True,
        env={**BUILD_ENV, "TIERKIT_SANITIZE": "address,undefined"},
    )


def check_canary(session: nox.Session, python: str, code: str, expect: str) -> None:
    """Run `code` in a subprocess under ASan; it must die with report `expect`."""
    env = {**os.environ, **asan_env(python)}
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # report to stderr, where we look for it
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode == 0 or expect not in proc.stderr:
        session.error(f"sanitizer canary NOT caught ({code!r}): rc={proc.returncode}\n{proc.stderr[-2000:]}")
    session.log(f"canary caught: {expect} ({code})")


FINDING_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "CHECK failed")


def check_no_reports(session: nox.Session) -> None:
    # allocator_may_return_null=1 logs a WARNING for each deliberately
    # impossible allocation; only errors are findings.
    reports = [p for p in sorted(ASAN_LOGS.glob("*")) if any(m in p.read_text() for m in FINDING_MARKERS)]
    if reports:
        session.error("sanitizer findings:\n" + "\n".join(p.read_text()[-3000:] for p in reports))


def sanitize_python_tier(
    session: nox.Session, python: str, name: str, canary: str, *pytest_args: str
) -> None:
    install_sanitized(session, python, name)
    check_canary(session, python, canary, "ERROR: AddressSanitizer: heap-buffer-overflow")
    pytest_under_asan(session, python, str(ROOT / TIERS[name].path / "tests"), *pytest_args)


def pytest_under_asan(session: nox.Session, python: str, *pytest_args: str) -> None:
    """pytest against the sanitized tiers; fails on any report in build/asan-logs."""
    shutil.rmtree(ASAN_LOGS, ignore_errors=True)
    ASAN_LOGS.mkdir(parents=True)
    session.run(
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *pytest_args,
        external=True,
        env=asan_env(python),
    )
    check_no_reports(session)


@nox.session
def sanitize(session: nox.Session) -> None:
    """ASan+UBSan (and TSan for the threaded parts) over core, then the Python tiers under ASan."""
    ctest_core(
        session,
        BUILD_DIR / "core-asan",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DTIERKIT_SANITIZE=address,undefined",
    )
    ctest_core(
        session,
        BUILD_DIR / "core-tsan",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DTIERKIT_SANITIZE=thread",
        ctest_args=("-R", "CachingAllocator|ThreadPool|Kernels|canary"),
    )
    python = shared_env(session, *requirements_for(["bridge", "torch"]))
    install_tiers(session, python, ["core"])
    shutil.rmtree(ASAN_SITE, ignore_errors=True)
    sanitize_python_tier(session, python, "bridge", "import tierkit_bridge._bridge as b; b._asan_canary()")
    # torch.compile and JIT tests are left out here: they exercise inductor's
    # and cpp_extension's generated builds (uninstrumented), not our code,
    # and would spawn compilers under the ASan preload.
    sanitize_python_tier(
        session,
        python,
        "torch",
        "import tierkit_torch, torch; torch.ops.tierkit._asan_canary()",
        "--ignore-glob=*test_compile.py",
        "--ignore-glob=*test_jit.py",
    )
    # The cross-tier journey and bad-input tests, against both sanitized tiers.
    pytest_under_asan(
        session, python, str(ROOT / "tests" / "test_journey.py"), str(ROOT / "tests" / "test_bad_inputs.py")
    )


@nox.session
def build(session: nox.Session) -> None:
    """Wheels for every tier, in dependency order, into dist/."""
    python = shared_env(session, *requirements_for(list(TIERS)))
    DIST_DIR.mkdir(exist_ok=True)
    for name in TIERS:
        session.run(
            python,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(DIST_DIR),
            str(ROOT / TIERS[name].path),
            external=True,
            env=BUILD_ENV,
        )
        install_tiers(session, python, [name])
    session.log("wheels: " + ", ".join(sorted(p.name for p in DIST_DIR.glob("*.whl"))))


@nox.session
def demo(session: nox.Session) -> None:
    """Build every tier and run core's CMake consumer demo (find_package(tierkit_core))."""
    python = shared_env(session, *requirements_for(list(TIERS)))
    install_tiers(session, python, list(TIERS))
    cmake_dir = subprocess.check_output([python, "-m", "tierkit_core", "--cmakedir"], text=True).strip()
    demo_build = BUILD_DIR / "core-demo"
    session.run(
        "cmake",
        "-S",
        str(ROOT / "packages/cpp-core/examples/consumer"),
        "-B",
        str(demo_build),
        f"-Dtierkit_core_DIR={cmake_dir}",
        external=True,
    )
    session.run("cmake", "--build", str(demo_build), external=True)
    session.run(str(demo_build / "consumer"), external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark report: builds the tiers in dependency order, runs `tierkit bench`.

    `nox -s bench -- --quick` for the one-minute smoke version; `-- --out DIR`
    to write somewhere other than bench-results/."""
    names = ["core", "bridge", "torch", "tools"]
    if "CUDA_HOME" in BUILD_ENV:
        names.insert(3, "cuda")
    python = shared_env(session, *requirements_for(names), "ci/requirements-bench.txt")
    install_tiers(session, python, names)
    args = list(session.posargs)
    if "--out" not in args:
        args += ["--out", str(ROOT / "bench-results")]
    session.run(python, "-m", "tierkit", "bench", *args, external=True, env=BUILD_ENV)


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
