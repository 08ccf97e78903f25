"""The operator library carries no Python: a C++ program (an AOTInductor
runner) can load it with nothing but libtorch."""

from __future__ import annotations

from pathlib import Path

import tierkit_torch
from tierkit_torch_common.build import python_dependencies


def test_operator_library_has_no_python_dependency():
    path = tierkit_torch.library_path()
    assert Path(path).is_file() and Path(path).name.endswith(".so")
    assert python_dependencies(path) == []


def test_library_path_is_the_library_that_registered_the_ops():
    import torch

    maps = Path("/proc/self/maps").read_text()
    assert str(Path(tierkit_torch.library_path()).resolve()) in maps
    assert torch._C._dispatch_has_kernel_for_dispatch_key("tierkit::mul", "CPU")
