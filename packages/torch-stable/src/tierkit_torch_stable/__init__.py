"""The tierkit operators on torch's stable C ABI, in the ``tierkit_stable``
namespace: the same schemas and semantics as ``tierkit::`` (tierkit-torch),
from a library that loads unchanged on every torch from 2.13 on.

Importing this package loads the operator library (no Python in it,
``library_path()``) and registers from Python what the stable C++ API cannot
express: fake kernels (core's, shared with tierkit-torch) and autograd
(reverse and forward mode). The ops are then ``torch.ops.tierkit_stable.<name>``
and the typed functions in :mod:`tierkit_torch_stable.ops`.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path

import torch

__all__ = ["MIN_TORCH", "library_path", "ops"]
__version__ = _metadata.version("tierkit-torch-stable")  # one source: the repository's VERSION

MIN_TORCH = "2.13"  # TORCH_TARGET_VERSION the library was compiled with (setup.py)


def library_path() -> str:
    """The operator library: a plain shared library, no Python in it."""
    return str(Path(__file__).resolve().parent / "libtierkit_stable_ops.so")


def _require_min_torch() -> None:
    running = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if running < tuple(int(p) for p in MIN_TORCH.split(".")):
        raise ImportError(
            f"tierkit_torch_stable needs torch >= {MIN_TORCH} (its library was built for the stable ABI "
            f"of {MIN_TORCH}), but torch {torch.__version__} is installed: pip install 'torch>={MIN_TORCH}'"
        )


_require_min_torch()
torch.ops.load_library(library_path())  # static initialisers register the schemas and CPU kernels

from . import _registrations  # noqa: E402

_registrations.register()

from . import ops  # noqa: E402
