"""A kind="ctest" tier, as docs/architecture.md's "Adding a tier" describes
it: its session builds and runs *its own* CMake project's CTest suite, and
runs pytest only on a tests/python folder it really has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BOOTSTRAP = ROOT / ".nox" / "_bootstrap" / "bin" / "python"  # where ci/nox.sh installs nox

RECORD = """
import json, sys
sys.argv = ["nox"]
sys.path.insert(0, {root!r})
import noxfile
from nox_support.tiers import TIERS, Tier

TIERS["mytier"] = Tier("mytier", {path!r}, "mytier", kind="ctest", cmake_args=("-DMYTIER_TESTS=ON",))

class Recorder:
    posargs = []
    calls = []
    def run(self, *args, **kwargs):
        self.calls.append([str(a) for a in args])
    def log(self, *a): pass
    def warn(self, *a): pass
    def error(self, *a): self.calls.append(["error", *map(str, a)])

session = Recorder()
noxfile.run_tier_tests(session, "mytier", "-R", "Mine")
print(json.dumps(session.calls))
"""


def test_a_ctest_tier_runs_its_own_ctest_and_no_missing_pytest(tmp_path):
    if not BOOTSTRAP.exists():
        pytest.skip("nox's bootstrap venv (made by ci/nox.sh) is not here")
    tier = tmp_path / "my-tier"  # a CMake project with no tests/python
    tier.mkdir()
    proc = subprocess.run(
        [str(BOOTSTRAP), "-c", RECORD.format(root=str(ROOT), path=str(tier))],
        capture_output=True,
        text=True,
        # Recorded installs must never stamp the developer's .nox/_env.
        env={**os.environ, "TIERKIT_NOX_ENV": str(tmp_path / "env")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = json.loads(proc.stdout.strip().splitlines()[-1])
    configure, build, ctest = calls[:3]
    assert configure[:3] == ["cmake", "-S", str(tier)] and "-DMYTIER_TESTS=ON" in configure
    build_dir = configure[configure.index("-B") + 1]
    assert build_dir == str(ROOT / "build" / "mytier-tests")
    assert build[:3] == ["cmake", "--build", build_dir]
    assert ctest[:3] == ["ctest", "--test-dir", build_dir] and ctest[-2:] == ["-R", "Mine"]
    assert not any("packages/cpp-core" in arg for call in calls for arg in call), calls
    assert len(calls) == 3, f"nothing after CTest without tests/python, got {calls[3:]}"
