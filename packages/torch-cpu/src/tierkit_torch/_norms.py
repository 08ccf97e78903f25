"""The row reductions' Python side (rms_norm and its family, the op table's
RowReduction entries): typed faces, vmap rules and DTensor strategies.
Fake kernels are torch-common's (register_row_reduction_fakes); kernels and
autograd are C++ (csrc/rms_norm.cpp, csrc/rms_norm_autograd.cpp). See
docs/reductions.md for how a reduction crosses every tier.
"""

from __future__ import annotations

import torch
from torch import Tensor

_ops = torch.ops.tierkit


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """``F.rms_norm(x, (x.size(-1),), weight, eps)``: ``x / sqrt(mean(x², -1) + eps) * weight``.

    ``eps`` defaults to torch's (the compute type's machine epsilon). 16-bit
    inputs are accumulated in float32; each row is reduced in one fixed order
    (bit-identical results for any thread count). ``weight`` has x's dtype and
    length x.size(-1). Differentiable in ``x`` and ``weight``, in reverse and
    forward mode.
    """
    return _ops.rms_norm.default(x, weight, eps)


def add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor | None = None, eps: float | None = None
) -> tuple[Tensor, Tensor]:
    """``(rms_norm(h, weight, eps), h)`` with ``h = x + residual`` rounded to the
    dtype, as a model computing ``x + residual`` itself would; one pass over
    memory. Differentiable in all three tensors."""
    return _ops.add_rms_norm.default(x, residual, weight, eps)


def add_rms_norm_(
    x: Tensor, residual: Tensor, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    """In place (vLLM's ``fused_add_rms_norm``): ``residual`` becomes
    ``h = x + residual``; returns ``rms_norm(h, weight, eps)``. Not
    differentiable (it writes into ``residual``); functionalized under
    ``torch.compile``."""
    return _ops.add_rms_norm_.default(x, residual, weight, eps)


# ---- vmap ---------------------------------------------------------------------


def _front(info, t: Tensor, dim: int | None) -> Tensor:
    return t.unsqueeze(0).expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)


def _scale_per_example(y: Tensor, weight: Tensor, dim: int) -> Tensor:
    # A batched weight: one per example, applied after the unweighted norm.
    w = weight.movedim(dim, 0)
    return y * w.reshape(w.shape[0], *([1] * (y.dim() - 2)), w.shape[-1])


def _rms_norm_rule(info, in_dims, x, weight=None, eps=None):
    wd = in_dims[1] if len(in_dims) > 1 else None
    x = _front(info, x, in_dims[0])
    if wd is None:
        return _ops.rms_norm.default(x, weight, eps), 0
    return _scale_per_example(_ops.rms_norm.default(x, None, eps), weight, wd), 0


def _add_rms_norm_rule(info, in_dims, x, residual, weight=None, eps=None):
    wd = in_dims[2] if len(in_dims) > 2 else None
    x, residual = _front(info, x, in_dims[0]), _front(info, residual, in_dims[1])
    if wd is None:
        return _ops.add_rms_norm.default(x, residual, weight, eps), (0, 0)
    y, h = _ops.add_rms_norm.default(x, residual, None, eps)
    return (_scale_per_example(y, weight, wd), h), (0, 0)


def _unbatched_weight(name: str, in_dims, index: int) -> None:
    if len(in_dims) > index and in_dims[index] is not None:
        raise RuntimeError(
            f"tierkit::{name}: vmap over a batched weight is not supported for this building block; "
            "tierkit::rms_norm's own rule handles one"
        )


def _forward_rule(info, in_dims, x, weight, eps):
    _unbatched_weight("_rms_norm_forward", in_dims, 1)
    y, rstd = _ops._rms_norm_forward.default(_front(info, x, in_dims[0]), weight, eps)
    return (y, rstd), (0, 0)


def _backward_rule(info, in_dims, grad, x, weight, rstd):
    _unbatched_weight("_rms_norm_backward", in_dims, 2)
    g, xb, r = _front(info, grad, in_dims[0]), _front(info, x, in_dims[1]), _front(info, rstd, in_dims[3])
    dx, dw = _ops._rms_norm_backward.default(g, xb, weight, r)
    if weight is None:
        return (dx, g.new_empty((info.batch_size, 0))), (0, 0)
    # Per example: the kernel's weight gradient sums over the batch's rows too.
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    dims = list(range(1, xb.dim() - 1))
    prod = g.to(wide) * xb.to(wide) * r
    dw = (prod.sum(dims) if dims else prod).to(weight.dtype)
    return (dx, dw), (0, 0)


def register_vmap() -> None:
    torch.library.register_vmap("tierkit::rms_norm", _rms_norm_rule)
    torch.library.register_vmap("tierkit::add_rms_norm", _add_rms_norm_rule)
    torch.library.register_vmap("tierkit::_rms_norm_forward", _forward_rule)
    torch.library.register_vmap("tierkit::_rms_norm_backward", _backward_rule)


# ---- DTensor ------------------------------------------------------------------


def register_sharding() -> None:
    """Rows are independent: x (and residual, grad, rstd) sharded on any
    leading dim with a replicated weight needs no communication and keeps
    its placement; the weight's gradient is then a Partial sum. The
    normalised (last) dim must be whole: a shard of it is redistributed to
    Replicate first, so the values stay right."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding as on

    def rows_of(x) -> range:
        return range(x.ndim - 1)

    def w(weight):
        return None if weight is None else Replicate()

    @on(_ops.rms_norm.default)
    def _rms(x, weight=None, eps=None):
        out = [([Replicate()], [Replicate(), w(weight), None])]
        out += [([Shard(k)], [Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(_ops.add_rms_norm.default)
    def _add(x, residual, weight=None, eps=None):
        out = [([Replicate(), Replicate()], [Replicate(), Replicate(), w(weight), None])]
        out += [([Shard(k), Shard(k)], [Shard(k), Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(_ops._rms_norm_forward.default)
    def _fwd(x, weight, eps):
        out = [([Replicate(), Replicate()], [Replicate(), w(weight), None])]
        out += [([Shard(k), Shard(k)], [Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(_ops._rms_norm_backward.default)
    def _bwd(grad, x, weight, rstd):
        dw = Replicate() if weight is None else Partial()
        out = [([Replicate(), Replicate()], [Replicate(), Replicate(), w(weight), Replicate()])]
        out += [([Shard(k), dw], [Shard(k), Shard(k), w(weight), Shard(k)]) for k in rows_of(x)]
        return out
