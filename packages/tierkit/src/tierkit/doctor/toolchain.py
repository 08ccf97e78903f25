"""Python, C++ compiler, ninja, cmake."""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
import tempfile
from pathlib import Path

from . import probe
from .report import Check, fail, ok, warn


def python_checks() -> list[Check]:
    version = platform.python_version()
    checks = [
        ok(
            "environment",
            f"{sys.prefix}: the doctor examines the Python it runs in; to check another environment "
            "(e.g. .nox/_env), run that environment's `python -m tierkit doctor`",
        ),
        ok("python", f"{version} ({sys.executable})")
        if sys.version_info >= (3, 10)
        else warn(
            "python", version, "torch tiers need Python >= 3.10 (their wheels use the 3.10 limited API)"
        ),
        ok("platform", f"{platform.system()} {platform.machine()} ({platform.platform()})"),
    ]
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    checks.append(
        warn(
            "free-threaded",
            "yes (no GIL)",
            "torch and the limited-API tier wheels target the GIL build; use a regular CPython",
        )
        if free_threaded
        else ok("free-threaded", "no (regular GIL build)")
    )
    return checks


def find_cxx() -> str | None:
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and probe.which(candidate):
            return probe.which(candidate)
    return None


CXX17_PROGRAM = """
#include <optional>
#include <string_view>
#include <variant>
int main() {
  std::optional<int> x = 17;
  std::string_view s = "tierkit";
  if constexpr (sizeof(void*) == 8) { return *x == 17 && s.size() == 7 ? 0 : 1; }
  return 0;
}
"""


def compiler_checks() -> list[Check]:
    cxx = find_cxx()
    if cxx is None:
        return [
            fail(
                "c++ compiler",
                "not found (CXX, c++, g++, clang++)",
                "install g++ (apt-get install g++) or set CXX",
            )
        ]
    version = probe.run([cxx, "--version"]).stdout.splitlines()[:1]
    checks = [ok("c++ compiler", f"{cxx}: {version[0] if version else '?'}")]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "cxx17.cpp")
        src.write_text(CXX17_PROGRAM)
        exe = Path(tmp, "cxx17")
        built = probe.run([cxx, "-std=c++17", str(src), "-o", str(exe)])
        ran = probe.run([str(exe)]) if built.ok else built
    checks.append(
        ok("c++17", "compiles and runs a C++17 program")
        if built.ok and ran.ok
        else fail("c++17", probe.tail(built.stderr or ran.stderr) or "failed", "use g++ >= 8 or clang++ >= 7")
    )
    return checks


def build_tool_checks() -> list[Check]:
    checks = []
    ninja = probe.which("ninja")
    if ninja:
        checks.append(ok("ninja", f"{probe.run([ninja, '--version']).stdout.strip()} ({ninja})"))
    else:
        checks.append(
            fail(
                "ninja",
                "not found",
                "install ninja (apt-get install ninja-build or pip install ninja): torch's JIT load() requires it",
            )
        )
    cmake = probe.which("cmake")
    if cmake:
        line = probe.run([cmake, "--version"]).stdout.splitlines()[:1]
        checks.append(ok("cmake", line[0] if line else cmake))
    else:
        checks.append(
            fail("cmake", "not found", "install cmake >= 3.18 (apt-get install cmake or pip install cmake)")
        )
    return checks
