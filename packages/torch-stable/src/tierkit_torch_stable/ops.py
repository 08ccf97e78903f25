"""The typed Python face of the tierkit_stable operators: the same functions
and rules as :mod:`tierkit_torch.ops` (see its docstrings), over
``torch.ops.tierkit_stable``."""

from __future__ import annotations

import torch
from tierkit_core.torch_fake import scalar_argument
from torch import Tensor

__all__ = ["add_out", "custom_add", "mul", "muladd", "scale_shift"]

_ops = torch.ops.tierkit_stable


def custom_add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` elementwise; differentiable (reverse and forward mode) unless ``out=`` is given."""
    return _ops.custom_add.default(a, b) if out is None else _ops.custom_add.out(a, b, out=out)


def mul(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` elementwise."""
    return _ops.mul.default(a, b) if out is None else _ops.mul.out(a, b, out=out)


def scale_shift(x: Tensor, alpha: float, beta: float, *, out: Tensor | None = None) -> Tensor:
    """``alpha * x + beta`` elementwise, one pass; 16-bit inputs computed in float32, rounded once."""
    alpha = scalar_argument(torch, "tierkit_torch_stable.scale_shift", "alpha", alpha)
    beta = scalar_argument(torch, "tierkit_torch_stable.scale_shift", "beta", beta)
    return (
        _ops.scale_shift.default(x, alpha, beta)
        if out is None
        else _ops.scale_shift.out(x, alpha, beta, out=out)
    )


def muladd(a: Tensor, b: Tensor, c: float, *, out: Tensor | None = None) -> Tensor:
    """``a * b + c`` elementwise, ``c`` a number (a tensor requiring grad is refused)."""
    c = scalar_argument(torch, "tierkit_torch_stable.muladd", "c", c)
    return _ops.muladd.default(a, b, c) if out is None else _ops.muladd.out(a, b, c, out=out)


def add_out(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """Write ``a + b`` into ``out`` (the result's shape, a dtype it casts to; may alias an input exactly); return it."""
    return _ops.add_out.default(a, b, out)
