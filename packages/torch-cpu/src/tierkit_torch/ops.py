"""The typed Python face of the tierkit operators.

Thin wrappers over ``torch.ops.tierkit.*``: the dispatcher picks the kernel
(CPU here, CUDA from tierkit-cuda, fake under ``torch.compile``), so these add
only signatures and documentation.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["add_out", "custom_add", "mul", "muladd", "scale_shift"]


def custom_add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` elementwise.

    ``a`` and ``b`` must have the same shape, dtype (float32, float64,
    float16 or bfloat16) and device; any strides. Returns a new tensor laid
    out like aten's result (the inputs' strides when they share one dense
    layout, e.g. channels_last; else contiguous). Differentiable in both
    inputs, in reverse and forward mode.

    With ``out=``, writes there and returns it, in aten's convention: an
    empty ``out`` is resized, a non-empty one of another shape is an error;
    not differentiable.
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

    16-bit inputs are computed in float32 and rounded once.
    """
    if out is not None:
        return torch.ops.tierkit.scale_shift.out(x, float(alpha), float(beta), out=out)
    return torch.ops.tierkit.scale_shift.default(x, float(alpha), float(beta))


def muladd(a: Tensor, b: Tensor, c: float, *, out: Tensor | None = None) -> Tensor:
    """``a * b + c`` elementwise, ``c`` a Python float; one pass over memory."""
    if out is not None:
        return torch.ops.tierkit.muladd.out(a, b, float(c), out=out)
    return torch.ops.tierkit.muladd.default(a, b, float(c))


def add_out(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """Write ``a + b`` into ``out`` and return ``out``.

    ``out`` must match ``a`` in shape, dtype and device, may be ``a`` or ``b``
    exactly (in place) but must not partially overlap them. Not
    differentiable, like torch's own ``out=`` overloads.
    """
    return torch.ops.tierkit.add_out.default(a, b, out)
