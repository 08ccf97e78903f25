"""PyTorch custom operators in the ``tierkit`` namespace, with CPU kernels on
tierkit's C++ core.

Importing this package loads the operator library (a plain shared library
without Python, ``library_path()``; after torch, so its symbols resolve) and
registers the Python-side kernels: fake (meta) kernels
for ``torch.compile``/``torch.export`` and autograd formulas. The ops are then
available both as ``torch.ops.tierkit.<name>`` and through :mod:`tierkit_torch.ops`.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch  # noqa: F401  (must come first: the library links against it)

from . import _loader, _registrations

__version__ = _metadata.version("tierkit-torch")  # one source: the repository's VERSION

if not _loader.jit_requested():
    _loader.load_aot()
    _registrations.register()

from . import allocator, models, nn, ops
from .models import patch

# Every op's typed face (tierkit_torch.ops) also here, as tierkit_torch.<op>.
globals().update({name: getattr(ops, name) for name in ops.__all__})
globals().update({name: getattr(nn, name) for name in nn.__all__})  # the modules: RMSNorm, LayerNorm
__all__ = [
    *nn.__all__,
    "allocator",
    "get_include",
    "library_path",
    "models",
    "nn",
    "ops",
    "patch",
    *ops.__all__,
]


def library_path() -> str:
    """The operator library file: what a C++ program (an AOTInductor runner)
    must load (dlopen / torch::ops) before it runs a model that calls tierkit
    ops. It has no Python dependency. The JIT build's file once that is loaded."""
    return _loader.library_path() or _loader.aot_library_path()


def get_include() -> str:
    """Headers other torch tiers build against (``tierkit_torch/checks.h``)."""
    installed = Path(__file__).resolve().parent / "include"
    if installed.is_dir():
        return str(installed)
    return str(Path(__file__).resolve().parents[2] / "include")  # source checkout


if TYPE_CHECKING:

    def __getattr__(name: str) -> Callable[..., Any]: ...
