import os
import stat
from pathlib import Path

import pytest
import workspace_guard


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A directory of fake executables put first on PATH; returns a factory."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    def make(name: str, script: str) -> Path:
        exe = bindir / name
        exe.write_text("#!/bin/sh\n" + script + "\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        return exe

    return make


@pytest.fixture
def fake_toolkit(tmp_path):
    """A CUDA toolkit root whose nvcc reports `version`."""

    def make(version: str) -> Path:
        root = tmp_path / f"cuda-{version}"
        (root / "bin").mkdir(parents=True)
        (root / "lib64").mkdir()
        (root / "lib64" / "libcudart.so").write_text("")
        nvcc = root / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version}, V{version}.1'\n")
        nvcc.chmod(0o755)
        return root

    return make


@pytest.fixture(autouse=True)
def _leaves_the_workspace_alone():
    """No test may change the developer's shared env, its stamps or the
    source tree (workspace_guard.py)."""
    before = workspace_guard.state()
    yield
    changed = workspace_guard.changed(before, workspace_guard.state())
    assert not changed, f"this test changed the developer's workspace: {changed}"
