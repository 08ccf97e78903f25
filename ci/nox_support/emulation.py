"""Core's tests on CPUs this machine is not, under qemu-user (docs/reliability.md).

tests-core-aarch64: core's CTest suite cross-built with Debian's aarch64
toolchain (ci/aarch64-linux-gnu.cmake) and run under qemu-aarch64, where core
has no SIMD dispatch (its portable loops only).

tests-core-x86-baseline: core's CTest suite built here and the bridge's pytest
(the shared env's python), each under qemu-x86_64 on CPU models below this
host's: Westmere (SSE4.2, no AVX) and Haswell (AVX2 + FMA + F16C, no
AVX-512). Core reads the model's CPUID; a test asserts the level it picked
(TIERKIT_EXPECT_SIMD) and any instruction above the model's level would die
with SIGILL.

Both: in full on demand; `-- --subset` (what the `tests` session runs) builds
core_tests from a few of its sources and runs those, to fit CI's minutes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nox

from . import prebuild
from .ctest import CTestBuild
from .env import BUILD_DIR, MAX_JOBS, ROOT
from .tiers import TIERS

AARCH64_TOOLCHAIN = ROOT / "ci" / "aarch64-linux-gnu.cmake"
QEMU_X86 = ROOT / "ci" / "qemu-x86_64.sh"

# qemu CPU model -> (its -cpu argument, the level core must pick on it).
# Haswell's TSX, PCID, x2APIC and TSC-deadline bits are dropped: qemu's TCG
# lacks them and would warn about each on every start (nothing in user
# space uses them).
X86_MODELS = {
    "Westmere": ("Westmere", "baseline"),
    "Haswell": ("Haswell,-hle,-rtm,-pcid,-invpcid,-x2apic,-tsc-deadline", "avx2"),
}

# The CI subset: core_tests from these sources only (all but layer_norm's,
# the longest to compile: the pointwise kernels at every dtype, the 16-bit
# conversions, rms_norm's, softmax's and both rotary forms' rows, the level
# check, the thread pool), and the bridge's row ops; the full run has everything.
SUBSET_SOURCES = (
    "test_kernels.cpp", "test_dtype.cpp", "test_parallel.cpp", "test_conversions_simd.cpp",
    "test_rotary.cpp", "test_rotary_cached.cpp", "test_rms_norm.cpp", "test_softmax.cpp", "test_silu_mul.cpp",
)  # fmt: skip
BRIDGE_SUBSET = ("test_rows.py",)
# In the subset, the bridge's rows at Haswell's level run natively, capped
# by TIERKIT_SIMD: the bridge has no dispatch of its own (core's kernels pick
# the level, and CTest checks the emulated CPU's pick), so qemu's run was the
# same AVX2 code ~10x slower. Westmere's run stays emulated: the baseline
# build's bridge must not execute one AVX instruction.
BRIDGE_NATIVE_IN_SUBSET = {"Haswell": "avx2"}
# The bridge's fork tests: the same qemu-user abort as core's (a forked child
# of a threaded process starting a thread); deselected, logged.
BRIDGE_DESELECTED = {
    "test_hardening.py::test_forked_worker_after_parallel_parent_work": "qemu-user aborts in forked children",
    "test_hardening.py::test_dataloader_with_forked_workers": "qemu-user aborts in forked children",
}
SKIPPED_IN_SUBSET = {
    # exp over every 64th float (67 M): 2.5-5.5 min under qemu alone.
    "VExpSigmoid": "every 64th float through exp takes minutes under qemu; the full run has it",
    "SoftmaxExp.Within": "every 256th float of [-110, 0] through exp: tens of seconds under qemu; the full run has it",
    # A row is one thread's whole, so "the same bits for any runner" is the
    # partition's property, not the CPU's: five runs of the same rows, about a
    # minute under qemu's AVX2; each level's rows against the scalar rows'
    # bits stay in the subset.
    "BitIdenticalForAnyRunner": "the row partition's property, the same on any CPU; the full run has it",
}

# Left out under emulation, each with its reason (ctest -E, logged): CTest's
# reruns of the kernels under TIERKIT_SIMD=avx512|avx2|baseline (and the
# rows' streaming at avx512|avx2) wherever that cap is at or above what the
# CPU has, so the rerun is the plain run again (core does not dispatch on
# aarch64; Westmere is baseline; Haswell has no AVX-512).
SAME_AS_PLAIN_RUN = "TIERKIT_SIMD cap at or above this CPU's level: the plain run's path again"
SKIPPED = {
    "aarch64": {"VectorizedKernels.simd_|RowKinds.streaming_stores_": SAME_AS_PLAIN_RUN},
    "Westmere": {
        "VectorizedKernels.simd_|RowKinds.streaming_stores_": SAME_AS_PLAIN_RUN,
        # fp_contract_tests is compiled with -mavx2 -mfma on purpose (the
        # FMA-host case), so not for this CPU; it runs on Haswell.
        "FpContract": "built with -mavx2 -mfma on purpose (an FMA host's build); runs on Haswell",
    },
    "Haswell": {
        "VectorizedKernels.simd_avx|RowKinds.streaming_stores_avx512": SAME_AS_PLAIN_RUN,
        # qemu 7.2's SSE/AVX NaN rule is not the hardware's: add(sNaN, qNaN)
        # gives the qNaN where x86 gives the first operand, quieted (probed
        # with vaddps and addps), so a table entry for a NaN input built by
        # the AVX2 loop and the same value computed by the test's SSE code
        # disagree in payload bits under Haswell emulation only. On hardware
        # at the AVX2 level (TIERKIT_SIMD=avx2 in tests-core) they pass bit
        # for bit, and on emulated Westmere too.
        "VectorizedKernels.InnerTable": "qemu's NaN propagation differs from x86 hardware's (payload bits)",
    },
}
# In the subset, Haswell's baseline rerun too (Westmere runs baseline).
SKIPPED_IN_SUBSET_ON = {"Haswell": {"VectorizedKernels.simd_baseline": "Westmere runs the baseline level"}}


# The cross compiler and qemu-user, installed where missing (Debian's
# packages), as a build's first step: the emulation builds are queued in the
# background before the tools are there on a fresh machine, and each without
# this step failed its configure (no aarch64-linux-gnu-g++; gtest's discovery
# needs qemu-x86_64) and was redone in the foreground, about two minutes of
# CI's run. A foreground session waits for its background build before any
# step of its own, so two apt-gets never meet.
TOOLS_STEP: prebuild.Step = (["bash", str(ROOT / "ci" / "system-deps.sh"), "emulation"], {})


def _subset(args) -> tuple[bool, list[str]]:
    """`--subset` (CI's part) out of the session's arguments; the rest go to ctest."""
    return "--subset" in args, [a for a in args if a != "--subset"]


def _skipped(session: nox.Session, cpu: str, subset: bool) -> dict[str, str]:
    """What `cpu`'s run leaves out, each logged with its reason: ctest -E
    patterns (the CTest entries: reruns, fp_contract_tests) that are also,
    with * around each alternative, gtest filters (core_tests' shards)."""
    skipped = dict(SKIPPED[cpu])
    if subset:
        skipped.update(SKIPPED_IN_SUBSET)
        skipped.update(SKIPPED_IN_SUBSET_ON.get(cpu, {}))
    for pattern, why in skipped.items():
        session.log(f"left out under emulation: {pattern}: {why}")
    return skipped


def _ctest(session: nox.Session, build_dir, skipped: dict[str, str], ctest_args, env: dict[str, str]) -> None:
    """ctest over an emulated build: core_tests runs as MAX_JOBS shards
    (SHARDS_DEFINE), its left-out tests named to gtest in GTEST_FILTER."""
    names = [alt for pattern in skipped for alt in pattern.split("|")]
    gtest_filter = {"GTEST_FILTER": "-" + ":".join(f"*{n}*" for n in names)} if names else {}
    session.run(
        "ctest", "--test-dir", str(build_dir), "--output-on-failure", "-j", MAX_JOBS,
        *(["-E", "|".join(skipped)] if skipped else []), *ctest_args,
        external=True, env={**env, **gtest_filter},
    )  # fmt: skip


# core_tests as shards (tests/CMakeLists.txt): a process per test costs qemu
# a startup each (~0.3 s on x86, where core builds its 16-bit tables at load).
SHARDS_DEFINE = f"-DTIERKIT_CORE_TEST_SHARDS={MAX_JOBS}"


def _build_steps(
    build_dir, subset: bool, *cmake_args: str, env: dict[str, str] | None = None
) -> list[prebuild.Step]:
    """Core's CTest build (ctest.py's, so the same configure) in Release, of the
    subset's sources or all, as gtest shards."""
    sources = ";".join(SUBSET_SOURCES) if subset else ""
    defines = (
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DTIERKIT_CORE_TEST_SOURCES={sources}",
        SHARDS_DEFINE,
        *cmake_args,
    )
    return [TOOLS_STEP, *CTestBuild(build_dir, defines, env=tuple((env or {}).items())).steps("core")]


AARCH64_DIR = BUILD_DIR / "core-aarch64"
X86_DIR = BUILD_DIR / "core-x86-baseline"


def aarch64_build_steps(subset: bool) -> list[prebuild.Step]:
    """The cross build's commands, each (argv, environment added)."""
    return _build_steps(AARCH64_DIR, subset, f"-DCMAKE_TOOLCHAIN_FILE={AARCH64_TOOLCHAIN}")


def x86_build_steps(subset: bool) -> list[prebuild.Step]:
    # CMAKE_SYSTEM_NAME marks the build as cross (to the same system) so that
    # every CMake (3.28 on: only when cross compiling) runs the tests, and
    # gtest's discovery, through the launcher (discovery on qemu's "max"
    # model, which has all it emulates: fp_contract_tests is AVX2 code).
    return _build_steps(
        X86_DIR, subset,
        "-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=x86_64",
        f"-DCMAKE_CROSSCOMPILING_EMULATOR={QEMU_X86}",
        env={"TIERKIT_QEMU_CPU": "max"},
    )  # fmt: skip


def _timed(session: nox.Session, what: str, start: float) -> None:
    session.log(f"{what}: {time.monotonic() - start:.0f} s")


def test_aarch64(session: nox.Session, args) -> None:
    """Core's CTest suite cross-built for aarch64, run under qemu-aarch64."""
    subset, ctest_args = _subset(args)
    build_dir = AARCH64_DIR
    start = time.monotonic()
    prebuild.run_after(session, build_dir.name, aarch64_build_steps(subset))
    _timed(session, "cross build", start)
    start = time.monotonic()
    _ctest(
        session, build_dir, _skipped(session, "aarch64", subset), ctest_args,
        {"TIERKIT_EMULATED": "qemu-aarch64", "TIERKIT_EXPECT_SIMD": "none"},
    )  # fmt: skip
    _timed(session, "ctest under qemu-aarch64", start)


def test_x86_baseline(session: nox.Session, bridge_python: str | None, args) -> None:
    """Core's CTest suite and the bridge's pytest on each x86 model of X86_MODELS."""
    subset, ctest_args = _subset(args)
    build_dir = X86_DIR
    start = time.monotonic()
    prebuild.run_after(session, build_dir.name, x86_build_steps(subset))
    _timed(session, "build", start)
    for model, (cpu, level) in X86_MODELS.items():
        session.log(f"==== {model} (qemu -cpu {cpu}): core must pick {level}")
        env = {
            "TIERKIT_EMULATED": f"qemu-x86_64 -cpu {model}",
            "TIERKIT_QEMU_CPU": cpu,
            "TIERKIT_EXPECT_SIMD": level,
        }
        start = time.monotonic()
        _ctest(session, build_dir, _skipped(session, model, subset), ctest_args, env)
        _timed(session, f"ctest on {model}", start)
        if bridge_python is None:
            continue
        tests = ROOT / TIERS["bridge"].path / "tests"
        paths = [str(tests / name) for name in BRIDGE_SUBSET] if subset else [str(tests)]
        if subset and model in BRIDGE_NATIVE_IN_SUBSET:
            level = BRIDGE_NATIVE_IN_SUBSET[model]
            session.log(
                f"bridge on {model}: natively at TIERKIT_SIMD={level} (the subset's; qemu adds ~30 s)"
            )
            start = time.monotonic()
            session.run(
                bridge_python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *paths,
                external=True, env={"TIERKIT_SIMD": level},
            )  # fmt: skip
            _timed(session, f"bridge pytest at {level}", start)
            continue
        deselect = []
        for test, why in BRIDGE_DESELECTED.items():
            if not subset or test.split("::")[0] in BRIDGE_SUBSET:
                session.log(f"left out under emulation: {test}: {why}")
                deselect += ["--deselect", str((tests / test).relative_to(ROOT))]
        start = time.monotonic()
        session.run(
            "qemu-x86_64", "-cpu", cpu, bridge_python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
            *deselect, *paths, external=True, env=env,
        )  # fmt: skip
        _timed(session, f"bridge pytest on {model}", start)
