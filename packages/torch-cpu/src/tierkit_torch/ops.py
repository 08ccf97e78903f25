"""The typed Python face of the tierkit operators.

Thin wrappers over ``torch.ops.tierkit.*``: the dispatcher picks the kernel
(CPU here, CUDA from tierkit-cuda, fake under ``torch.compile``), so these add
only signatures and documentation.
"""

from __future__ import annotations

import torch
from tierkit_core.torch_fake import scalar_argument
from torch import Tensor

__all__ = ["add_out", "custom_add", "mul", "muladd", "scale_shift"]


def custom_add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` elementwise.

    aten's rules, as ``torch.add``: ``a`` and ``b`` broadcast, their dtypes
    promote (``torch.result_type``; the result must be float32, float64,
    float16 or bfloat16), any strides; one device. Returns a new tensor laid
    out like aten's result. Differentiable in both inputs, in reverse and
    forward mode (a broadcast input's gradient is summed to its shape).

    With ``out=``, writes there and returns it, in aten's convention: an
    empty ``out`` is resized, a non-empty one of another shape is an error,
    another dtype the result can be cast to is written cast; not
    differentiable.
    """
    if out is not None:
        return torch.ops.tierkit.custom_add.out(a, b, out=out)
    return torch.ops.tierkit.custom_add.default(a, b)


def mul(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` elementwise; same rules as :func:`custom_add`."""
    if out is not None:
        return torch.ops.tierkit.mul.out(a, b, out=out)
    return torch.ops.tierkit.mul.default(a, b)


def scale_shift(x: Tensor, alpha: float, beta: float, *, out: Tensor | None = None) -> Tensor:
    """``alpha * x + beta`` elementwise, in one pass over memory.

    16-bit inputs are computed in float32 and rounded once. ``alpha`` and
    ``beta`` are numbers (a 0-d tensor is read by value); a tensor that
    requires grad is refused: no gradient reaches a float argument.
    """
    alpha = scalar_argument(torch, "tierkit_torch.scale_shift", "alpha", alpha)
    beta = scalar_argument(torch, "tierkit_torch.scale_shift", "beta", beta)
    if out is not None:
        return torch.ops.tierkit.scale_shift.out(x, alpha, beta, out=out)
    return torch.ops.tierkit.scale_shift.default(x, alpha, beta)


def muladd(a: Tensor, b: Tensor, c: float, *, out: Tensor | None = None) -> Tensor:
    """``a * b + c`` elementwise, ``c`` a number (as ``alpha`` of :func:`scale_shift`); one pass over memory."""
    c = scalar_argument(torch, "tierkit_torch.muladd", "c", c)
    if out is not None:
        return torch.ops.tierkit.muladd.out(a, b, c, out=out)
    return torch.ops.tierkit.muladd.default(a, b, c)


def add_out(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """Write ``a + b`` into ``out`` and return ``out``.

    ``out`` must have the result's shape (it is never resized) and a dtype the
    result can be cast to; it may be ``a`` or ``b`` exactly (in place) but
    must not partially overlap them. Not differentiable, like torch's own
    ``out=`` overloads.
    """
    return torch.ops.tierkit.add_out.default(a, b, out)
