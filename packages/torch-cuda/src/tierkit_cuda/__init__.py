"""CUDA kernels for the tierkit operators.

Importing this package imports :mod:`tierkit_torch` first (which defines the
``tierkit`` schemas, fake kernels and autograd), then loads the CUDA kernels,
so ``torch.ops.tierkit.*`` and :mod:`tierkit_torch.ops` run on CUDA tensors.
It imports without a GPU; calls then need one.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path

import tierkit_torch
import torch

__all__ = ["cuda_available", "library_path", "time_op"]
__version__ = _metadata.version("tierkit-cuda")  # one source: the repository's VERSION


def library_path() -> str:
    """The CUDA kernels' library (no Python in it): a C++ program loads it
    after tierkit_torch.library_path()'s, which defines the schemas."""
    return str(Path(__file__).resolve().parent / "libtierkit_cuda_ops.so")


def _require_built_torch() -> None:
    try:
        from ._build_info import TORCH_VERSION
    except ImportError:  # never built: the load below says so
        return
    from tierkit_torch_common.build import require_built_torch

    require_built_torch("tierkit_cuda", TORCH_VERSION, torch.__version__, "packages/torch-cuda")


_require_built_torch()
try:
    torch.ops.load_library(library_path())  # static initialisers register the CUDA kernels
except OSError as exc:  # pragma: no cover - depends on the installed torch
    if torch.version.cuda is None:
        raise ImportError(
            f"tierkit_cuda needs a CUDA build of torch, but torch {torch.__version__} is CPU-only "
            "(torch.version.cuda is None). Install the CUDA build it was built against "
            "(pip install torch==2.14.1) and rebuild with --no-build-isolation."
        ) from exc
    raise ImportError(
        f"tierkit_cuda failed to load its kernels ({exc}). It must run with the torch it was built "
        "against; run `tierkit doctor` to compare versions."
    ) from exc

ops = tierkit_torch.ops


def cuda_available() -> bool:
    """True when a CUDA device can run the kernels (not just compile them)."""
    return torch.cuda.is_available()


def time_op(op: str, a: torch.Tensor, b: torch.Tensor | None = None, iters: int = 20) -> float:
    """Mean milliseconds per call of a tierkit op on the current stream,
    measured with a CUDA event pair after one warm-up call."""
    return torch.ops.tierkit_cuda.time_op(op, a, a if b is None else b, iters)
