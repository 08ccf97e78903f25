"""Running the Python tiers under ASan+UBSan, and proving the sanitizer is live.

Instrumented builds go to build/asan-site (the normal install stays
untouched) and are put first on PYTHONPATH; reports go to build/asan-logs,
which are checked after each pytest run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from . import prebuild
from .env import BUILD_DIR, BUILD_ENV, ROOT, pip_install_argv
from .tiers import TIERS, parallel_pytest_args

ASAN_SITE = BUILD_DIR / "asan-site"
ASAN_LOGS = BUILD_DIR / "asan-logs"
FINDING_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "CHECK failed")


def asan_env() -> dict[str, str]:
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


def install_step(py: str, name: str) -> prebuild.Step:
    """The command (argv, environment added) that builds tier `name` with
    ASan+UBSan into build/asan-site."""
    tier = TIERS[name]
    assert tier.sanitized is not None, f"tier {name} has no sanitizer settings in the tier table"
    argv = pip_install_argv(
        py, ROOT / tier.path, "--upgrade", "--target", str(ASAN_SITE), *tier.sanitized.pip_args
    )
    return argv, {**BUILD_ENV, "TIERKIT_SANITIZE": "address,undefined"}


PREBUILD_KEY = "asan-site"


def site_steps(py: str, names: list[str]) -> list[prebuild.Step]:
    """build/asan-site afresh with the tiers `names` in it: the commands."""
    return [(["rm", "-rf", str(ASAN_SITE)], {}), *(install_step(py, name) for name in names)]


def make_site(session: nox.Session, py: str, names: list[str]) -> None:
    """site_steps, unless prebuild.py ran them in the background."""
    if prebuild.wait(session, PREBUILD_KEY):
        session.log(f"{ASAN_SITE.name}: {', '.join(names)} built in the background")
        return
    for argv, env in site_steps(py, names):
        session.run(*argv, external=True, env=env)


def check_canary(session: nox.Session, py: str, code: str, expect: str) -> None:
    """Run `code` in a subprocess under ASan; it must die with report `expect`."""
    env = {**os.environ, **asan_env()}
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # report to stderr, where we look for it
    proc = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode == 0 or expect not in proc.stderr:
        session.error(f"sanitizer canary NOT caught ({code!r}): rc={proc.returncode}\n{proc.stderr[-2000:]}")
    session.log(f"canary caught: {expect} ({code})")


def check_no_reports(session: nox.Session) -> None:
    # allocator_may_return_null=1 logs a WARNING for each deliberately
    # impossible allocation; only errors are findings.
    reports = [p for p in sorted(ASAN_LOGS.glob("*")) if any(m in p.read_text() for m in FINDING_MARKERS)]
    if reports:
        session.error("sanitizer findings:\n" + "\n".join(p.read_text()[-3000:] for p in reports))


def pytest_under_asan(session: nox.Session, py: str, *pytest_args: str) -> None:
    """pytest against the sanitized tiers; fails on any report in build/asan-logs."""
    shutil.rmtree(ASAN_LOGS, ignore_errors=True)
    ASAN_LOGS.mkdir(parents=True)
    session.run(
        py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, external=True, env=asan_env()
    )
    check_no_reports(session)


def sanitize_tier(session: nox.Session, py: str, name: str) -> None:
    """Tier `name`'s canary, then its pytest, under ASan (make_site built it)."""
    settings = TIERS[name].sanitized
    assert settings is not None, f"tier {name} has no sanitizer settings in the tier table"
    check_canary(session, py, settings.canary, "ERROR: AddressSanitizer: heap-buffer-overflow")
    parallel = parallel_pytest_args(py) if TIERS[name].parallel_tests else ()  # workers inherit the preload
    pytest_under_asan(session, py, *parallel, str(ROOT / TIERS[name].path / "tests"), *settings.pytest_args)
