"""ci/nox_support/compiler_cache.py: core's CMake test builds compile through
ccache when ci/nox.sh installed it, so a second build of the same sources with
the same flags (the x86-baseline subset after the Release build) is cache hits;
without ccache the same configure drops the launcher again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from nox_recorder import ROOT

sys.path.insert(0, str(ROOT / "ci"))
from nox_support import compiler_cache

BOOTSTRAP_CCACHE = ROOT / ".nox" / "_bootstrap" / "bin" / "ccache"
PROJECT = """cmake_minimum_required(VERSION 3.16)
project(cached CXX)
add_executable(cached main.cpp)
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    for tool in ("cmake", "ninja", "c++"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROJECT)
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    monkeypatch.setattr(compiler_cache, "CACHE_DIR", tmp_path / "ccache")
    return src


def build(src, build_dir):
    subprocess.run(["cmake", "-S", src, "-B", build_dir, "-G", "Ninja", *compiler_cache.cmake_args()],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["cmake", "--build", build_dir], check=True, capture_output=True)


def launcher(build_dir) -> str:
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith("CMAKE_CXX_COMPILER_LAUNCHER:"):
            return line.split("=", 1)[1]
    return ""


def test_a_second_build_of_the_same_sources_hits_the_cache(project, tmp_path, monkeypatch):
    if not BOOTSTRAP_CCACHE.exists():
        pytest.skip("no ccache in .nox/_bootstrap (ci/nox.sh installs it)")
    monkeypatch.setattr(compiler_cache, "ccache", lambda: str(BOOTSTRAP_CCACHE))
    build(project, tmp_path / "a")
    build(project, tmp_path / "b")
    assert str(tmp_path / "ccache") in launcher(tmp_path / "b")
    stats = subprocess.run(
        [BOOTSTRAP_CCACHE, "--print-stats"], env={**os.environ, "CCACHE_DIR": str(tmp_path / "ccache")},
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    assert int(counts["direct_cache_hit"]) == 1, stats
    assert int(counts["cache_miss"]) == 1, stats


def test_without_ccache_the_launcher_is_dropped(project, tmp_path, monkeypatch):
    build_dir = tmp_path / "a"
    if BOOTSTRAP_CCACHE.exists():  # a build directory configured with it first
        monkeypatch.setattr(compiler_cache, "ccache", lambda: str(BOOTSTRAP_CCACHE))
        build(project, build_dir)
        assert launcher(build_dir)
    monkeypatch.setattr(compiler_cache, "ccache", lambda: None)
    assert compiler_cache.cmake_args() == ["-DCMAKE_C_COMPILER_LAUNCHER=", "-DCMAKE_CXX_COMPILER_LAUNCHER="]
    build(project, build_dir)
    assert launcher(build_dir) == ""
