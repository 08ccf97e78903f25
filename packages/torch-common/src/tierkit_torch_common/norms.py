"""The row reductions' Python side for any namespace that defines them
(``tierkit``: torch-cpu, ``tierkit_stable``: torch-stable): typed faces,
vmap rules and DTensor strategies, written once for the op table's
RowReduction kind. Fake kernels are in :mod:`.fake`; kernels (and, for
``tierkit``, autograd) are each tier's. See docs/reductions.md. torch is
imported by the caller, this module only receives it.
"""

from __future__ import annotations

from typing import Any, Callable


def row_reduction_faces(ops: Any) -> dict[str, Callable[..., Any]]:
    """rms_norm, add_rms_norm and add_rms_norm_ over ``ops`` (torch.ops.<ns>)."""

    def rms_norm(x: Any, weight: Any = None, eps: float | None = None) -> Any:
        """``F.rms_norm(x, (x.size(-1),), weight, eps)``: ``x / sqrt(mean(x², -1) + eps) * weight``.

        ``eps`` defaults to torch's (the compute type's machine epsilon). 16-bit
        inputs are accumulated in float32; each row is reduced in one fixed order
        (bit-identical results for any thread count). ``weight`` has x's dtype and
        length x.size(-1). Differentiable in ``x`` and ``weight``, in reverse and
        forward mode.
        """
        return ops.rms_norm.default(x, weight, eps)

    def add_rms_norm(x: Any, residual: Any, weight: Any = None, eps: float | None = None) -> Any:
        """``(rms_norm(h, weight, eps), h)`` with ``h = x + residual`` rounded to the
        dtype, as a model computing ``x + residual`` itself would; one pass over
        memory. Differentiable in all three tensors."""
        return ops.add_rms_norm.default(x, residual, weight, eps)

    def add_rms_norm_(x: Any, residual: Any, weight: Any = None, eps: float | None = None) -> Any:
        """In place (vLLM's ``fused_add_rms_norm``): ``residual`` becomes
        ``h = x + residual``; returns ``rms_norm(h, weight, eps)``. Not
        differentiable (it writes into ``residual``); functionalized under
        ``torch.compile``."""
        return ops.add_rms_norm_.default(x, residual, weight, eps)

    return {"rms_norm": rms_norm, "add_rms_norm": add_rms_norm, "add_rms_norm_": add_rms_norm_}


# ---- vmap ---------------------------------------------------------------------


def register_row_reduction_vmap(torch: Any, ns: str) -> None:
    """Batch rules for every batch dim: the batch becomes one more leading
    (row) dim; a batched weight is applied per example after the unweighted norm."""
    ops = getattr(torch.ops, ns)

    def front(info: Any, t: Any, dim: int | None) -> Any:
        return t.unsqueeze(0).expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)

    def scale_per_example(y: Any, weight: Any, dim: int) -> Any:
        w = weight.movedim(dim, 0)
        return y * w.reshape(w.shape[0], *([1] * (y.dim() - 2)), w.shape[-1])

    def rms_norm_rule(info, in_dims, x, weight=None, eps=None):
        wd = in_dims[1] if len(in_dims) > 1 else None
        x = front(info, x, in_dims[0])
        if wd is None:
            return ops.rms_norm.default(x, weight, eps), 0
        return scale_per_example(ops.rms_norm.default(x, None, eps), weight, wd), 0

    def add_rms_norm_rule(info, in_dims, x, residual, weight=None, eps=None):
        wd = in_dims[2] if len(in_dims) > 2 else None
        x, residual = front(info, x, in_dims[0]), front(info, residual, in_dims[1])
        if wd is None:
            return ops.add_rms_norm.default(x, residual, weight, eps), (0, 0)
        y, h = ops.add_rms_norm.default(x, residual, None, eps)
        return (scale_per_example(y, weight, wd), h), (0, 0)

    def unbatched_weight(name: str, in_dims, index: int) -> None:
        if len(in_dims) > index and in_dims[index] is not None:
            raise RuntimeError(
                f"{ns}::{name}: vmap over a batched weight is not supported for this building block; "
                f"{ns}::rms_norm's own rule handles one"
            )

    def forward_rule(info, in_dims, x, weight, eps):
        unbatched_weight("_rms_norm_forward", in_dims, 1)
        y, rstd = ops._rms_norm_forward.default(front(info, x, in_dims[0]), weight, eps)
        return (y, rstd), (0, 0)

    def backward_rule(info, in_dims, grad, x, weight, rstd):
        unbatched_weight("_rms_norm_backward", in_dims, 2)
        g, xb, r = front(info, grad, in_dims[0]), front(info, x, in_dims[1]), front(info, rstd, in_dims[3])
        dx, dw = ops._rms_norm_backward.default(g, xb, weight, r)
        if weight is None:
            return (dx, g.new_empty((info.batch_size, 0))), (0, 0)
        # Per example: the kernel's weight gradient sums over the batch's rows too.
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        dims = list(range(1, xb.dim() - 1))
        prod = g.to(wide) * xb.to(wide) * r
        dw = (prod.sum(dims) if dims else prod).to(weight.dtype)
        return (dx, dw), (0, 0)

    torch.library.register_vmap(f"{ns}::rms_norm", rms_norm_rule)
    torch.library.register_vmap(f"{ns}::add_rms_norm", add_rms_norm_rule)
    torch.library.register_vmap(f"{ns}::_rms_norm_forward", forward_rule)
    torch.library.register_vmap(f"{ns}::_rms_norm_backward", backward_rule)


# ---- DTensor ------------------------------------------------------------------


def register_row_reduction_sharding(torch: Any, ns: str) -> None:
    """Rows are independent: x (and residual, grad, rstd) sharded on any
    leading dim with a replicated weight needs no communication and keeps
    its placement; the weight's gradient is then a Partial sum. The
    normalised (last) dim must be whole: a shard of it is redistributed to
    Replicate first, so the values stay right."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding as on

    ops = getattr(torch.ops, ns)

    def rows_of(x) -> range:
        return range(x.ndim - 1)

    def w(weight):
        return None if weight is None else Replicate()

    @on(ops.rms_norm.default)
    def _rms(x, weight=None, eps=None):
        out = [([Replicate()], [Replicate(), w(weight), None])]
        out += [([Shard(k)], [Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(ops.add_rms_norm.default)
    def _add(x, residual, weight=None, eps=None):
        out = [([Replicate(), Replicate()], [Replicate(), Replicate(), w(weight), None])]
        out += [([Shard(k), Shard(k)], [Shard(k), Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(ops._rms_norm_forward.default)
    def _fwd(x, weight, eps):
        out = [([Replicate(), Replicate()], [Replicate(), w(weight), None])]
        out += [([Shard(k), Shard(k)], [Shard(k), w(weight), None]) for k in rows_of(x)]
        return out

    @on(ops._rms_norm_backward.default)
    def _bwd(grad, x, weight, rstd):
        dw = Replicate() if weight is None else Partial()
        out = [([Replicate(), Replicate()], [Replicate(), Replicate(), w(weight), Replicate()])]
        out += [([Shard(k), dw], [Shard(k), Shard(k), w(weight), Shard(k)]) for k in rows_of(x)]
        return out
