"""The operator library carries no Python: a C++ program (an AOTInductor
runner) can load it with nothing but libtorch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import tierkit_torch


def python_dependencies(library: str) -> list[str]:
    """Py* symbols the library imports, and Python libraries it needs."""
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", library], capture_output=True, text=True, check=True
    ).stdout.split()
    needed = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    found = sorted({s for s in undefined if s.startswith(("Py", "_Py"))})
    found += [line for line in needed.splitlines() if "NEEDED" in line and ("python" in line.lower())]
    return found


def test_operator_library_has_no_python_dependency():
    path = tierkit_torch.library_path()
    assert Path(path).is_file() and Path(path).name.endswith(".so")
    assert python_dependencies(path) == []


def test_library_path_is_the_library_that_registered_the_ops():
    import torch

    maps = Path("/proc/self/maps").read_text()
    assert str(Path(tierkit_torch.library_path()).resolve()) in maps
    assert torch._C._dispatch_has_kernel_for_dispatch_key("tierkit::mul", "CPU")
