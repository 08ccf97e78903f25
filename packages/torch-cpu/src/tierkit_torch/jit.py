"""Build the tierkit ops just in time with ``torch.utils.cpp_extension.load``.

The same C++ sources as the wheel, compiled on first use (cached under the
torch extensions directory or ``build_directory``). The JIT and AOT libraries
both define the ``tierkit`` namespace, so a process uses one of them: set
``TIERKIT_TORCH_JIT=1`` before ``import tierkit_torch`` to keep the AOT one
from loading, then call :func:`load`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.utils import cpp_extension

from . import _loader, _registrations

__all__ = ["load", "sources"]


def _source_root() -> Path:
    here = Path(__file__).resolve().parent
    return here if (here / "csrc").is_dir() else here.parents[1]  # installed wheel / source checkout


def sources() -> list[str]:
    """The C++ files the JIT build compiles (the AOT build's, shipped in the package)."""
    return sorted(str(p) for p in (_source_root() / "csrc").glob("*.cpp"))


def load(verbose: bool = False, build_directory: str | None = None):
    """Compile (if needed) and load the tierkit ops; returns ``torch.ops.tierkit``."""
    if _loader.loaded() == "jit":
        return torch.ops.tierkit
    if _loader.loaded() == "aot":
        _loader.mark_loaded("jit")  # raises with the explanation
    import tierkit_core

    if build_directory is not None:
        os.makedirs(build_directory, exist_ok=True)
    root = _source_root()
    path = cpp_extension.load(
        name="tierkit_torch_jit",
        sources=sources(),
        extra_include_paths=[str(root / "include"), tierkit_core.get_include()],
        # -fopenmp: see setup.py, at::parallel_for needs it.
        extra_cflags=["-O3", "-fopenmp", *tierkit_core.cxx_flags()],
        extra_ldflags=["-fopenmp"],
        build_directory=build_directory,
        is_python_module=False,
        verbose=verbose,
    )
    _loader.mark_loaded("jit")
    _loader.set_loaded_path(str(path))
    _registrations.register()
    return torch.ops.tierkit
