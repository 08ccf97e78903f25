"""The installed tierkit-core wheel: headers present, CMake consumers find it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tierkit_core

CONSUMER = Path(__file__).resolve().parents[2] / "examples" / "consumer"


def test_get_include_holds_the_headers():
    include = Path(tierkit_core.get_include())
    for header in ("core.h", "buffer.h", "view.h", "kernels.h", "caching_allocator.h", "dtype.h"):
        assert (include / "tierkit" / header).is_file(), header


def test_get_cmake_dir_holds_the_package_config():
    cmake_dir = Path(tierkit_core.get_cmake_dir())
    assert (cmake_dir / "tierkit_coreConfig.cmake").is_file()
    assert (cmake_dir / "tierkit_coreTargets.cmake").is_file()


def test_module_cli_prints_locations():
    out = subprocess.run(
        [sys.executable, "-m", "tierkit_core", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == tierkit_core.get_cmake_dir()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
def test_cmake_consumer_finds_and_links_tierkit_core(tmp_path):
    build = tmp_path / "build"
    subprocess.run(
        [
            "cmake",
            "-S",
            str(CONSUMER),
            "-B",
            str(build),
            f"-Dtierkit_core_DIR={tierkit_core.get_cmake_dir()}",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    exe = build / "consumer"
    result = subprocess.run([str(exe)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["11", "22", "33"]
