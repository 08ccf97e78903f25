"""A kind="ctest" tier, as docs/architecture.md's "Adding a tier" describes
it: its session builds and runs *its own* CMake project's CTest suite, and
runs pytest only on a tests/python folder it really has."""

from __future__ import annotations

from nox_recorder import ROOT, recorded

RECORD = """
from nox_support.tiers import TIERS, Tier

TIERS["mytier"] = Tier("mytier", {path!r}, "mytier", kind="ctest", cmake_args=("-DMYTIER_TESTS=ON",))
noxfile.run_tier_tests(session, "mytier", "-R", "Mine")
print(json.dumps(session.calls))
"""


def test_a_ctest_tier_runs_its_own_ctest_and_no_missing_pytest(tmp_path):
    tier = tmp_path / "my-tier"  # a CMake project with no tests/python
    tier.mkdir()
    calls = recorded(RECORD.format(path=str(tier)), tmp_path / "env")
    configure, build, ctest = calls[:3]
    assert configure[:3] == ["cmake", "-S", str(tier)] and "-DMYTIER_TESTS=ON" in configure
    build_dir = configure[configure.index("-B") + 1]
    assert build_dir == str(ROOT / "build" / "mytier-tests")
    assert build[:3] == ["cmake", "--build", build_dir]
    assert ctest[:3] == ["ctest", "--test-dir", build_dir] and ctest[-2:] == ["-R", "Mine"]
    assert not any("packages/cpp-core" in arg for call in calls for arg in call), calls
    assert len(calls) == 3, f"nothing after CTest without tests/python, got {calls[3:]}"
