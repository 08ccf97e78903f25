"""Coverage-guided fuzzing of every path that reads untrusted memory.

Three targets, all under AddressSanitizer and UBSan:
- core_views (libFuzzer, packages/cpp-core/fuzz/fuzz_views.cpp): views over
  arbitrary shapes/strides/offsets, the out= overlap rule and broadcasting
  against brute force, the pointwise kernels against the scalar functor;
- core_rows (libFuzzer, fuzz_rows.cpp): the row kernels of every row
  reduction in the op table over arbitrary lengths, values and aliasing,
  against separate copies and the entry's formula in long double;
- bridge (atheris, packages/pybind-bridge/fuzz/fuzz_bridge.py): the bridge's
  entry points fed by fuzzer-built producers (buffer protocol, hand-built
  DLPack capsules, torch views), the bridge built with clang and
  -fsanitize=fuzzer-no-link so its C++ edges guide the fuzzer too.

The targets run side by side for the same time; each starts from its seed
corpus (committed, under the target's fuzz/corpus/) and grows a working
corpus under build/fuzz/. A finding (crash, sanitizer report, timeout, a
value that differs) is written to build/fuzz/findings/ and fails the session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nox

from .env import BUILD_DIR, BUILD_ENV, ROOT, mark_done, tier_digest

FUZZ_DIR = BUILD_DIR / "fuzz"
CORE_INCLUDE = ROOT / "packages" / "cpp-core" / "include"
# UBSan's checks but vptr, whose runtime (ubsan_cxx) atheris's ASan preload lacks.
UBSAN_CHECKS = (
    "signed-integer-overflow,shift,bounds,null,alignment,float-cast-overflow,integer-divide-by-zero,"
    "return,unreachable,bool,enum,pointer-overflow"
)
DEFAULT_SECONDS = 30  # per target in CI (they run side by side): the session stays under 3 minutes


@dataclass(frozen=True)
class Target:
    name: str
    source: Path  # the libFuzzer source, or the atheris script
    corpus: Path  # committed seeds
    atheris: bool = False


TARGETS = (
    Target(
        "core_views",
        ROOT / "packages/cpp-core/fuzz/fuzz_views.cpp",
        ROOT / "packages/cpp-core/fuzz/corpus/core_views",
    ),
    Target(
        "core_rows",
        ROOT / "packages/cpp-core/fuzz/fuzz_rows.cpp",
        ROOT / "packages/cpp-core/fuzz/corpus/core_rows",
    ),
    Target(
        "bridge",
        ROOT / "packages/pybind-bridge/fuzz/fuzz_bridge.py",
        ROOT / "packages/pybind-bridge/fuzz/corpus",
        atheris=True,
    ),
)


def seconds_from(posargs: list[str]) -> int:
    """`-- --minutes N` (fractions allowed); else DEFAULT_SECONDS."""
    if "--minutes" in posargs:
        return max(1, int(float(posargs[posargs.index("--minutes") + 1]) * 60))
    return DEFAULT_SECONDS


def require_clang(session: nox.Session) -> None:
    ok = shutil.which("clang++") is not None
    if ok:
        lib = subprocess.run(
            ["clang++", "-print-file-name=libclang_rt.fuzzer-x86_64.a"], capture_output=True, text=True
        ).stdout.strip()
        ok = Path(lib).is_file()
    if not ok:
        session.run("bash", str(ROOT / "ci" / "system-deps.sh"), "fuzz", external=True)


def build_libfuzzer(session: nox.Session, target: Target) -> subprocess.Popen:
    """Start compiling a libFuzzer target (returns the compiler's process)."""
    out = FUZZ_DIR / "bin" / target.name
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "clang++",
        "-std=c++17",
        "-O1",
        # Line tables: a finding's stack still names file:line, and the rows
        # target compiles in 49 s instead of 65 (clang 14, -g's full debug info).
        "-gline-tables-only",
        f"-fsanitize=fuzzer,address,{UBSAN_CHECKS}",
        "-fno-sanitize-recover=all",
        "-ffp-contract=off",
        "-fopenmp-simd",
        "-Wno-unknown-attributes",
        f"-I{CORE_INCLUDE}",
        str(target.source),
        "-o",
        str(out),
    ]
    session.log(" ".join(cmd))
    return subprocess.Popen(cmd)


def build_bridge(session: nox.Session, py: str) -> subprocess.Popen | None:
    """Start building the bridge with clang, ASan, UBSan and coverage for the
    fuzzer into build/fuzz/site (skipped when core's and the bridge's
    sources are unchanged since the last build)."""
    site = FUZZ_DIR / "site"
    stamp = FUZZ_DIR / "stamps" / f"bridge-{tier_digest('core')}{tier_digest('bridge')}"
    if stamp.exists() and (site / "tierkit_bridge").is_dir():
        session.log("fuzz: the instrumented bridge is up to date")
        return None
    shutil.rmtree(site, ignore_errors=True)
    cmd = [
        py,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-cache-dir",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(site),
        f"--config-settings=cmake.define.TIERKIT_SANITIZE=address,fuzzer-no-link,{UBSAN_CHECKS}",
        "--config-settings=cmake.build-type=RelWithDebInfo",
        "--config-settings=build-dir=" + str(FUZZ_DIR / "bridge-build"),
        str(ROOT / "packages" / "pybind-bridge"),
    ]
    session.log(" ".join(cmd))
    env = {**os.environ, **BUILD_ENV, "CC": "clang", "CXX": "clang++"}
    proc = subprocess.Popen(cmd, env=env)
    proc.stamp = stamp  # type: ignore[attr-defined]
    return proc


def _command(target: Target, py: str, seconds: int) -> tuple[list[str], dict[str, str]]:
    work = FUZZ_DIR / "corpus" / target.name
    work.mkdir(parents=True, exist_ok=True)
    findings = FUZZ_DIR / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    flags = [
        f"-max_total_time={seconds}",
        "-timeout=30",  # one input taking longer is a hang: a finding
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={findings}/{target.name}-",
        str(work),
        str(target.corpus),
    ]
    env = dict(os.environ)
    if not target.atheris:
        env["ASAN_OPTIONS"] = "detect_leaks=1:allocator_may_return_null=1"
        return [str(FUZZ_DIR / "bin" / target.name), *flags], env
    atheris_dir = subprocess.check_output(
        [py, "-c", "import atheris; print(atheris.path())"], text=True
    ).strip()
    env.update(
        {
            "LD_PRELOAD": f"{atheris_dir}/asan_with_fuzzer.so",
            # Python's own allocations look like leaks to LSan.
            "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
            "PYTHONPATH": str(FUZZ_DIR / "site"),
        }
    )
    return [py, str(target.source), *flags], env


@dataclass
class Result:
    target: str
    returncode: int
    executions: int
    coverage: str
    corpus: int
    log: Path


def _summary(target: Target, proc: subprocess.Popen, log: Path) -> Result:
    text = log.read_text(errors="replace")
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", text)
    corpus = sum(1 for _ in (FUZZ_DIR / "corpus" / target.name).iterdir())
    return Result(
        target.name,
        proc.returncode,
        int(runs[-1]) if runs else 0,
        f"{cov[-1][0]} edges, {cov[-1][1]} features" if cov else "-",
        corpus,
        log,
    )


def run_all(session: nox.Session, py: str, seconds: int) -> None:
    """Build every target, run them side by side for `seconds` each, report."""
    require_clang(session)
    builds = [build_libfuzzer(session, t) for t in TARGETS if not t.atheris]
    bridge = build_bridge(session, py)
    for proc in [*builds, *([bridge] if bridge else [])]:
        if proc.wait() != 0:
            session.error(f"fuzz: a build failed: {proc.args}")
    if bridge:
        mark_done(bridge.stamp)  # type: ignore[attr-defined]
    logs = FUZZ_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running = []
    start = time.monotonic()
    for target in TARGETS:
        cmd, env = _command(target, py, seconds)
        log = logs / f"{target.name}.log"
        session.log(f"fuzz: {target.name} for {seconds} s (log: {log})")
        with open(log, "w") as f:
            running.append((target, subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT), log))
    results = []
    for target, proc, log in running:
        try:
            proc.wait(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        results.append(_summary(target, proc, log))
    session.log(f"fuzz: {time.monotonic() - start:.0f} s side by side")
    for r in results:
        status = "no finding" if r.returncode == 0 else f"FINDING (exit {r.returncode})"
        session.log(
            f"fuzz: {r.target:10s} {r.executions:>10,d} executions, coverage {r.coverage}, "
            f"corpus {r.corpus} inputs: {status}"
        )
    failed = [r for r in results if r.returncode != 0]
    if failed:
        session.error(
            "fuzz findings (inputs in build/fuzz/findings/):\n"
            + "\n".join(f"--- {r.target}\n" + r.log.read_text(errors="replace")[-4000:] for r in failed)
        )
