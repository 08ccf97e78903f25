"""PyTorch custom operators in the ``tierkit`` namespace, with CPU kernels on
tierkit's C++ core.

Importing this package loads the compiled library (after torch, so its
symbols resolve) and registers the Python-side kernels: fake (meta) kernels
for ``torch.compile``/``torch.export`` and autograd formulas. The ops are then
available both as ``torch.ops.tierkit.<name>`` and through :mod:`tierkit_torch.ops`.
"""

from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401  (must come first: the library links against it)

from . import _loader, _registrations

__all__ = ["add_out", "custom_add", "get_include", "mul", "muladd", "ops", "scale_shift"]
__version__ = "0.1.0"

if not _loader.jit_requested():
    _loader.load_aot()
    _registrations.register()

from . import ops
from .ops import add_out, custom_add, mul, muladd, scale_shift


def get_include() -> str:
    """Headers other torch tiers build against (``tierkit_torch/checks.h``)."""
    installed = Path(__file__).resolve().parent / "include"
    if installed.is_dir():
        return str(installed)
    return str(Path(__file__).resolve().parents[2] / "include")  # source checkout
