"""tierkit's sessions, in dependency order (names are part of the interface).

Only the sessions live here. What they are made of lives in ci/nox_support/:
the tier table (tiers.py: adding a tier is one entry there plus its folder),
the shared environment .nox/_env (env.py), the CTest driver (ctest.py) and
the sanitizer harness (sanitizers.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent / "ci"))

from nox_support import emulation, fuzz, matrix, models, prebuild, sanitizers, wheels
from nox_support.ctest import CTestBuild, run_ctest
from nox_support.env import (
    BUILD_DIR,
    BUILD_ENV,
    DIST_DIR,
    ROOT,
    has_cuda_toolkit,
    install_tiers,
    shared_env,
)
from nox_support.tiers import (
    BENCH,
    CROSS_TIERS,
    FUZZ,
    LINT,
    TIERS,
    ci_selection,
    parallel_pytest_args,
    requirements_for,
    with_deps,
)

# torch.compile's cache goes inside the checkout (build/ is ignored and removed
# with it), not /tmp/torchinductor_<user>, where every clone's runs pile up
# gigabytes that nothing removes.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(BUILD_DIR / "inductor-cache"))

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "none"
nox.options.error_on_external_run = False


def env_with(session: nox.Session, names, *extra_requirements: str) -> str:
    """The shared env with what `names` need, those tiers installed; its python."""
    py = shared_env(session, *requirements_for(names), *extra_requirements)
    install_tiers(session, py, names)
    return py


def runnable(session: nox.Session, name: str) -> bool:
    if TIERS[name].cuda and not has_cuda_toolkit():
        session.warn(
            f"tests-{name} skipped: no CUDA toolkit (set CUDA_HOME to the directory holding bin/nvcc)"
        )
        return False
    return True


def release_build(name: str) -> CTestBuild:
    """A CMake tier's own CTest build (`tests-<name>`)."""
    return CTestBuild(BUILD_DIR / f"{name}-tests", ("-DCMAKE_BUILD_TYPE=Release",))


def run_tier_tests(session: nox.Session, name: str, *args: str, in_ci: bool = False) -> None:
    """One tier's tests: a CMake tier's own CTest suite (then its Python
    tests, where it has some: core checks its installed wheel), pytest for the
    rest; `in_ci` (the `tests` session) leaves out the tier's on-demand tests."""
    if not runnable(session, name):
        return
    tier = TIERS[name]
    if tier.kind == "ctest":
        run_ctest(session, name, release_build(name), ctest_args=args)
        python_tests = ROOT / tier.path / "tests" / "python"
        if python_tests.is_dir():  # pytest exits 4 on a missing path
            py = env_with(session, with_deps(name))
            session.run(py, "-m", "pytest", "-q", str(python_tests), external=True)
        return
    if tier.kind == "stable-abi":
        py = shared_env(session, *requirements_for(with_deps(name)))
        wheels.test_wheel_on_torches(session, py, name, args)
        return
    py = env_with(session, with_deps(name))
    jit_dir = {"TIERKIT_JIT_BUILD_DIR": str(BUILD_DIR / f"jit-{name}")}
    # A whole suite in parallel; a chosen few tests (arguments given) in one process.
    parallel = parallel_pytest_args(py) if tier.parallel_tests and not args else ()
    selection = ci_selection(name) if in_ci else ()
    if selection:
        session.log(f"left to tests-{name} and the on-demand cells: {', '.join(tier.on_demand_tests)}")
    session.run(
        py, "-m", "pytest", "-q", "-rs", *parallel, *selection, str(ROOT / tier.path / "tests"), *args,
        external=True, env={**BUILD_ENV, **jit_dir},
    )  # fmt: skip


def run_cross_tier_tests(session: nox.Session, *args: str) -> None:
    py = env_with(session, CROSS_TIERS)
    parallel = parallel_pytest_args(py, per_file=False) if not args else ()  # test_properties.py: most of it
    session.run(py, "-m", "pytest", "-q", "-rs", *parallel, str(ROOT / "tests"), *args, external=True)


def run_model_tests(session: nox.Session, *args: str, in_ci: bool = False) -> None:
    """tierkit in real transformers model code (packages/torch-cpu/tests-models),
    in each cell of ci/nox_support/models.py: the tiers in .nox/_env, each
    transformers/kernels pair in a venv of its own over it."""
    env_with(session, with_deps("torch"))
    models.run(session, args, in_ci=in_ci)


def _tier_session(name: str) -> None:
    @nox.session(name=f"tests-{name}")
    def _tests(session: nox.Session) -> None:
        run_tier_tests(session, name, *session.posargs)

    kinds = {
        "ctest": "CTest (extra arguments go to ctest, e.g. -- -R Kernels)",
        "stable-abi": "pytest under torch 2.14.1, 2.13.0 and 2.15.0, from one wheel built once",
    }
    _tests.__doc__ = (
        f"Install {TIERS[name].path} and what it needs, run its {kinds.get(TIERS[name].kind, 'pytest')}."
    )


for _name in TIERS:
    _tier_session(_name)


def _python_session(name: str, version: str) -> None:
    @nox.session(name=f"tests-{name}-{version}")
    def _tests(session: nox.Session) -> None:
        if not matrix.test_tier_on_python(session, name, version, tuple(session.posargs)):
            session.skip(f"Python {version} is not on this machine")

    _tests.__doc__ = (
        f"Build {TIERS[name].path} (and what it needs) with Python {version}; run its pytest there."
    )


# The tiers whose wheels depend on the interpreter, under each Python
# (ci/nox_support/matrix.py); `nox -l` lists them.
for _name in matrix.PER_PYTHON_TIERS:
    for _version in matrix.PYTHONS:
        _python_session(_name, _version)


_STARTED = time.monotonic()


def _step(session: nox.Session, label: str) -> None:
    """A step's heading with the minutes since nox started: CI's log then
    says where its time goes (the run's bar is 30 minutes)."""
    session.log(f"==== {label} (at {(time.monotonic() - _STARTED) / 60:.1f} min)")


@nox.session(name=f"tests-abi3-{matrix.ABI3_PYTHON}")
def tests_abi3(session: nox.Session) -> None:
    """torch-cpu's and torch-stable's cp310-abi3 wheels, built once here, tested
    unchanged under Python 3.13 with torch 2.14.1 from the registry (on demand:
    a ~3 GB download, 5.5 GB of disk)."""
    py = shared_env(session, *requirements_for(["core", "common", "torch", "stable"]))
    matrix.test_abi3_wheels_on_python(session, py, tuple(session.posargs))


@nox.session(name="tests-torch-next")
def tests_torch_next(session: nox.Session) -> None:
    """torch-cpu rebuilt from source against the newest torch (.nox/_torch_next)
    and its tests run there; torch-cuda's build and CPU-side tests too, where a
    CUDA toolkit is (a build that fails is explained by the doctor and skipped)."""
    matrix.test_torch_next(session, tuple(session.posargs))


@nox.session(name="tests-models")
def tests_models(session: nox.Session) -> None:
    """tierkit in real models: Llama, Mistral, Qwen2/3, Gemma 1/2/3, Phi-3 and
    GPT-2 from tiny random-init configs, patched (tierkit_torch.patch) and
    kernelized (kernels with tierkit_torch.hub), against stock: values, a
    training step, generation, compile, export; pickling, copies, wrappers,
    probes. Two cells, offline: the oldest pair transformers accepts
    (5.23.0 + kernels 0.18.3) and the newest (5.25.0 + 0.19.1),
    ci/requirements-models-{oldest,newest}.txt; `-- --cell newest` for one.
    test_sweep.py runs a sample of causal-LM types; `-- -m sweep` every one
    (the table in build/models-sweep/, docs/models.md)."""
    run_model_tests(session, *session.posargs)


@nox.session(name="tests-core-aarch64")
def tests_core_aarch64(session: nox.Session) -> None:
    """Core's CTest suite cross-built for aarch64 (g++-aarch64-linux-gnu) and
    run under qemu-aarch64; tests the emulator cannot run skip, saying why.
    `-- --subset` for CI's part (other arguments go to ctest)."""
    emulation.test_aarch64(session, session.posargs)


@nox.session(name="tests-core-x86-baseline")
def tests_core_x86_baseline(session: nox.Session) -> None:
    """Core's CTest suite and the bridge's pytest under qemu-x86_64 on CPU
    models without AVX (Westmere) and with AVX2 but no AVX-512 (Haswell):
    core must pick each model's level, and nothing above it may run.
    `-- --subset` for CI's part (other arguments go to ctest)."""
    py = env_with(session, with_deps("bridge"))
    emulation.test_x86_baseline(session, py, session.posargs)


@nox.session(name="tests-cross")
def tests_cross(session: nox.Session) -> None:
    """Cross-tier tests (tests/): journeys, properties, bad inputs, soaks.

    `-- --hypothesis-profile=soak` for >= 2000 examples per op."""
    run_cross_tier_tests(session, *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Every test that runs on this machine, tier by tier in dependency order, then tests-cross.

    Runs the tiers' tests inline (not via notify, which would queue them
    after any session named after `tests` on the command line)."""
    wheels.prepare_torch_envs()  # tests-stable's other torches install while the tiers before it test
    _prebuild_core()
    for name in TIERS:
        _step(session, f"tests-{name}")
        run_tier_tests(session, name, in_ci=True)
    _prebuild_asan_site(session)
    for name, version in matrix.CI_CELLS:  # tests-stable covered the newest torch
        _step(session, f"tests-{name}-{version}")
        matrix.test_tier_on_python(session, name, version, ())
    _step(session, "tests-core-aarch64 -- --subset")
    emulation.test_aarch64(session, ["--subset"])
    _step(session, "tests-core-x86-baseline -- --subset")
    emulation.test_x86_baseline(session, env_with(session, with_deps("bridge")), ["--subset"])
    _step(session, "tests-models")
    run_model_tests(session, in_ci=True)
    _step(session, "tests-cross")
    run_cross_tier_tests(session)


# Core's sanitized CTest builds; TSan's only of the threaded parts.
CORE_ASAN = CTestBuild(
    BUILD_DIR / "core-asan", ("-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DTIERKIT_SANITIZE=address,undefined")
)
CORE_TSAN = CTestBuild(
    BUILD_DIR / "core-tsan",
    ("-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DTIERKIT_SANITIZE=thread"),
    ("core_threaded_tests", "tsan_canary"),
)


def _sanitize_env(session: nox.Session) -> tuple[str, list[str]]:
    """The shared env with what the sanitized tiers build against
    (uninstrumented: core, torch-common); its python, and those tiers."""
    sanitized = [name for name, tier in TIERS.items() if tier.sanitized]
    needs = list(dict.fromkeys(n for name in sanitized for n in TIERS[name].needs if n not in sanitized))
    return env_with(session, needs, *requirements_for(sanitized)), sanitized


def _prebuild_core() -> None:
    """Queue the core builds that the sessions named after this one run
    (ci/nox_support/prebuild.py: in the background, at the lowest priority)."""
    later = prebuild.requested_sessions()
    if "tests" in later:
        release = release_build("core")
        prebuild.queue(release.build_dir.name, release.steps("core"))
        prebuild.queue(emulation.AARCH64_DIR.name, emulation.aarch64_build_steps(subset=True))
        prebuild.queue(emulation.X86_DIR.name, emulation.x86_build_steps(subset=True))
    if "sanitize" in later:
        for build in (CORE_ASAN, CORE_TSAN):
            prebuild.queue(build.build_dir.name, build.steps("core"))


def _prebuild_asan_site(session: nox.Session) -> None:
    """Queue the sanitized tiers' builds, when the sanitize session follows:
    after the tiers' own tests, which may (re)install tiers into the shared
    env that these builds compile against."""
    if "sanitize" in prebuild.requested_sessions():
        py, sanitized = _sanitize_env(session)
        prebuild.queue(sanitizers.PREBUILD_KEY, sanitizers.site_steps(py, sanitized))


@nox.session
def sanitize(session: nox.Session) -> None:
    """ASan+UBSan (and TSan for the threaded parts) over core, then the Python tiers under ASan."""
    _step(session, "sanitize: core under ASan+UBSan")
    run_ctest(session, "core", CORE_ASAN)
    _step(session, "sanitize: core under TSan")
    # core_threaded_tests: the allocator, pool and kernel tests alone (not
    # fp_contract_tests, nor the rest of core_tests: nothing threaded there;
    # nor core_tests' runs under an environment: the SIMD levels, streaming).
    tsan_tests = (
        "-R",
        "CachingAllocator|ThreadPool|Kernels|canary",
        "-E",
        "simd_|streaming_stores|NOT_BUILT",
    )
    run_ctest(session, "core", CORE_TSAN, ctest_args=tsan_tests)
    py, sanitized = _sanitize_env(session)
    _step(session, f"sanitize: {', '.join(sanitized)} built with ASan+UBSan")
    sanitizers.make_site(session, py, sanitized)
    for name in sanitized:
        _step(session, f"sanitize: {name} under ASan+UBSan")
        sanitizers.sanitize_tier(session, py, name)
    _step(session, "sanitize: the cross-tier journeys under ASan")
    # The cross-tier journey and bad-input tests, against the sanitized tiers.
    sanitizers.pytest_under_asan(
        session, py, str(ROOT / "tests" / "test_journey.py"), str(ROOT / "tests" / "test_bad_inputs.py")
    )


@nox.session(name="fuzz")
def fuzz_session(session: nox.Session) -> None:
    """Coverage-guided fuzzing under ASan+UBSan: libFuzzer over core's views,
    overlap, broadcast and kernels; atheris over the bridge's entry points
    (ci/nox_support/fuzz.py). Every target side by side for 30 s (CI), or
    `-- --minutes N` each; a finding fails the session."""
    py = env_with(session, ["core", "bridge"], FUZZ)
    fuzz.run_all(session, py, fuzz.seconds_from(list(session.posargs)))


@nox.session
def build(session: nox.Session) -> None:
    """Every tier from its sdist, in dependency order, into dist/; each wheel
    smoke-tested alone in a fresh venv; core's, the bridge's and the tools'
    wheels built with build isolation, their build requirements taken only
    from dist/ (the torch tiers' without, against the shared env's torch).

    The wheels are installed into .nox/_env too, so sessions run after this
    one (tests, lint) reuse them instead of compiling the tiers again."""
    _prebuild_core()  # core's test builds for the sessions after this one, while a core is idle
    names = [name for name in TIERS if runnable(session, name)]
    py = shared_env(session, *requirements_for(names))
    DIST_DIR.mkdir(exist_ok=True)
    for name in names:
        session.log(f"==== {name}: sdist, then the wheel from the sdist")
        wheel = wheels.build_from_sdist(session, py, name)
        wheels.install_wheel(session, py, name, wheel)
        wheels.smoke_test(session, py, name)
    for path in sorted(DIST_DIR.glob("*")):
        if path.is_file():
            session.log(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")


@nox.session
def demo(session: nox.Session) -> None:
    """Build every tier and run core's CMake consumer demo (find_package(tierkit_core))."""
    py = env_with(session, [name for name in TIERS if runnable(session, name)])
    cmake_dir = subprocess.check_output([py, "-m", "tierkit_core", "--cmakedir"], text=True).strip()
    demo_build = BUILD_DIR / "core-demo"
    consumer = ROOT / TIERS["core"].path / "examples/consumer"
    session.run(
        "cmake", "-S", str(consumer), "-B", str(demo_build), f"-Dtierkit_core_DIR={cmake_dir}", external=True
    )
    session.run("cmake", "--build", str(demo_build), external=True)
    session.run(str(demo_build / "consumer"), external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark report: builds the tiers in dependency order, runs `tierkit bench`.

    `nox -s bench -- --quick` for the one-minute smoke version; `-- --out DIR`
    to write somewhere other than bench-results/. It runs in tests-models'
    newest cell (.nox/_models_newest over .nox/_env: the tierkit-torch[transformers]
    extra, ci/requirements-models-newest.txt), so its models section measures
    on a fresh machine instead of being skipped."""
    names = [name for name, tier in TIERS.items() if tier.bench and (not tier.cuda or has_cuda_toolkit())]
    env_with(session, names, BENCH)
    py = models.cell_env(session, "newest")
    args = list(session.posargs)
    if "--out" not in args:
        args += ["--out", str(ROOT / "bench-results")]
    session.run(py, "-m", "tierkit", "bench", *args, external=True, env=BUILD_ENV)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy over every package's src/, stubtest of the bridge's hand-written
    stub against its compiled module, clang-format --dry-run over all C++/CUDA."""
    py = env_with(session, ["core", "bridge"], LINT)
    bindir = Path(py).parent
    session.run(str(bindir / "ruff"), "check", str(ROOT), external=True)
    session.run(str(bindir / "ruff"), "format", "--check", str(ROOT), external=True)
    sources = [str(ROOT / tier.path / "src") for tier in TIERS.values()]
    session.run(py, "-m", "mypy", *sources, external=True)
    allowlist = ROOT / TIERS["bridge"].path / "stubtest-allowlist.txt"
    session.run(
        py, "-m", "mypy.stubtest", "tierkit_bridge._bridge", "--allowlist", str(allowlist), external=True
    )
    cpp = [
        str(p)
        for ext in ("*.h", "*.cpp", "*.cu", "*.cuh")
        for p in (ROOT / "packages").rglob(ext)
        if "build" not in p.parts and "third_party" not in p.parts
    ]
    session.run(str(bindir / "clang-format"), "--dry-run", "--Werror", *cpp, external=True)
