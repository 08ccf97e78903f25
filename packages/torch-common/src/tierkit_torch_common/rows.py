"""The row reductions' Python side for any namespace that defines them
(``tierkit``: torch-cpu, ``tierkit_stable``: torch-stable), written once for
the op table's kind and instantiated per entry (``ROW_REDUCTIONS``): vmap
rules and the entry's reference formula over torch (what tests compare with
and what torch-stable's autograd differentiates). Checks, fakes, faces and
DTensor strategies are every row op's (``row_ops.py``); kernels are each
tier's. See
docs/reductions.md. torch is imported by the caller, this module only
receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tierkit_core.op_table import ROW_REDUCTIONS, RowReduction
from tierkit_core.op_testing import evaluate_row, row_names

__all__ = [
    "compute_dtype",
    "default_eps",
    "gradients",
    "reference",
    "register_row_vmap",
]


def compute_dtype(torch: Any, x: Any, params: Sequence[Any] = ()) -> Any:
    """Float, or double where x or a parameter is double (the kind's mixed-dtype rule)."""
    wide = x.dtype == torch.float64 or any(p is not None and p.dtype == torch.float64 for p in params)
    return torch.float64 if wide else torch.float32


def default_eps(torch: Any, entry: RowReduction, x: Any, eps: float | None) -> float:
    """The eps a call computes with: its own, the entry's default, or torch's (machine epsilon)."""
    if eps is not None:
        return eps
    if entry.eps is not None:
        return entry.eps
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


def _split(rest: Sequence[Any], p: int, default: Any = None) -> tuple[tuple[Any, ...], Any]:
    """The parameters (padded with None where a call left defaults out) and
    what follows them (eps, or the stats; `default` when left out)."""
    params = tuple(rest[:p]) + (None,) * (p - len(rest[:p]))
    return params, (rest[p] if len(rest) > p else default)


def _row_sum(t: Any) -> Any:
    return t.sum(tuple(range(t.dim() - 1))) if t.dim() > 1 else t


def _names(
    torch: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: Any, grad: Any
) -> dict[str, Any]:
    """The formulas' names bound (core's row_names) over torch: the inputs in the compute type."""
    c = compute_dtype(torch, x, params)
    functions = {"row_mean": lambda t: t.mean(-1, keepdim=True), "row_sum": _row_sum, "rsqrt": torch.rsqrt}
    return row_names(
        entry,
        x.to(c),
        [None if p is None else p.to(c) for p in params],
        default_eps(torch, entry, x, eps),
        functions,
        None if grad is None else grad.to(c),
    )


def reference(torch: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: float | None) -> Any:
    """The entry's value in the compute type (not rounded), differentiable."""
    return evaluate_row(entry, entry.reference, _names(torch, entry, x, params, eps, None))


def gradients(
    torch: Any, entry: RowReduction, grad: Any, x: Any, params: Sequence[Any], eps: float | None
) -> list[Any]:
    """Every input's gradient (x, then the parameters; None for an absent
    one) by the entry's formulas with torch's ops, in its input's dtype:
    differentiable, what double backward differentiates."""
    names = _names(torch, entry, x, params, eps, grad)
    out = [evaluate_row(entry, entry.derivatives["x"], names).to(x.dtype)]
    for name, p in zip(entry.params, params):
        out.append(None if p is None else evaluate_row(entry, entry.derivatives[name], names).to(p.dtype))
    return out


def normalized(torch: Any, entry: RowReduction, x: Any, stats: Any) -> Any:
    """x-hat from x (in the compute type) and the forward's stats ([..., len(entry.stats)])."""
    names: dict[str, Any] = {n: stats[..., i : i + 1] for i, n in enumerate(entry.stats)}
    names["x"] = x
    return eval(compile(entry.normalized, f"<{entry.name} x-hat>", "eval"), {"__builtins__": {}}, names)


# ---- vmap ---------------------------------------------------------------------


def register_row_vmap(torch: Any, ns: str) -> None:
    """Batch rules for every batch dim of every row reduction: the batch
    becomes one more leading (row) dim; batched parameters apply per example
    after the norm without them (the kind is affine in them), in the compute
    type, so a 16-bit result is rounded once, as a per-example call's."""
    ops = getattr(torch.ops, ns)

    def front(info: Any, t: Any, dim: int | None) -> Any:
        return t.unsqueeze(0).expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)

    def per_example(t: Any, dim: int | None, ndim: int) -> Any:
        if dim is None:
            return t
        t = t.movedim(dim, 0)
        return t.reshape(t.shape[0], *([1] * (ndim - 2)), t.shape[-1])

    def normalized_then_affine(
        x: Any, entry: RowReduction, params: Sequence[Any], dims: Sequence[int | None], eps: Any
    ) -> Any:
        """The op with batched parameters: x-hat in the compute type (the
        kernel on x widened, without parameters, with the eps x's call would
        take), each example's parameters applied there, rounded once to x's
        dtype, as the kernel rounds a per-example call."""
        c = compute_dtype(torch, x, params)
        e = default_eps(torch, entry, x, eps)
        out = getattr(ops, entry.name).default(x.to(c), *(None,) * len(params), e)
        for name, p, d in zip(entry.params, params, dims):
            if p is None:
                continue
            q = per_example(p, d, x.dim()).to(c)
            out = out * q if name == "weight" else out + q
        return out.to(x.dtype)

    def dims_of(in_dims: Sequence[Any], start: int, n: int) -> list[int | None]:
        return [in_dims[start + i] if len(in_dims) > start + i else None for i in range(n)]

    for entry in ROW_REDUCTIONS:
        p = len(entry.params)
        none = (None,) * p

        def op_rule(info, in_dims, x, *rest, _e=entry, _p=p):
            params, eps = _split(rest, _p, _e.eps)
            pd = dims_of(in_dims, 1, _p)
            x = front(info, x, in_dims[0])
            if all(d is None for d in pd):
                return getattr(ops, _e.name).default(x, *params, eps), 0
            return normalized_then_affine(x, _e, params, pd, eps), 0

        def add_rule(info, in_dims, x, residual, *rest, _e=entry, _p=p, _none=none):
            params, eps = _split(rest, _p, _e.eps)
            pd = dims_of(in_dims, 2, _p)
            x, residual = front(info, x, in_dims[0]), front(info, residual, in_dims[1])
            op = getattr(ops, _e.add_name).default
            if all(d is None for d in pd):
                return op(x, residual, *params, eps), (0, 0)
            _, h = op(x, residual, *_none, eps)  # h rounded to the dtype, as the kernel's
            return (normalized_then_affine(h, _e, params, pd, eps), h), (0, 0)

        def add_inplace_rule(info, in_dims, x, residual, *rest, _e=entry, _p=p, _none=none):
            name = f"{ns}::{_e.add_name}_"
            if in_dims[1] is None:
                raise RuntimeError(
                    f"vmap: {name} writes into `residual`, which is not batched while another argument is: "
                    "pass a batched residual"
                )
            params, eps = _split(rest, _p, _e.eps)
            pd = dims_of(in_dims, 2, _p)
            # movedim is a view: the kernel writes h into the caller's residual.
            x, residual = front(info, x, in_dims[0]), residual.movedim(in_dims[1], 0)
            op_ = getattr(ops, _e.add_name + "_").default
            if all(d is None for d in pd):
                return op_(x, residual, *params, eps), 0
            op_(x, residual, *_none, eps)  # residual becomes h
            return normalized_then_affine(residual, _e, params, pd, eps), 0

        def unbatched(name: str, in_dims: Sequence[Any], start: int, n: int, e: RowReduction) -> None:
            if any(d is not None for d in dims_of(in_dims, start, n)):
                raise RuntimeError(
                    f"{ns}::{name}: vmap over a batched parameter is not supported for this building block; "
                    f"{ns}::{e.name}'s own rule handles one"
                )

        def forward_rule(info, in_dims, x, *rest, _e=entry, _p=p):
            unbatched(_e.forward_name, in_dims, 1, _p, _e)
            y, stats = getattr(ops, _e.forward_name).default(front(info, x, in_dims[0]), *rest)
            return (y, stats), (0, 0)

        def backward_rule(info, in_dims, grad, x, *rest, _e=entry, _p=p):
            unbatched(_e.backward_name, in_dims, 2, _p, _e)
            params, stats = _split(rest, _p)
            g, xb = front(info, grad, in_dims[0]), front(info, x, in_dims[1])
            s = front(info, stats, in_dims[2 + _p])
            dx, *_ = getattr(ops, _e.backward_name).default(g, xb, *params, s)
            # Per example: the kernel's parameter gradients sum over the batch's rows too.
            c = compute_dtype(torch, x, params)
            dims = list(range(1, xb.dim() - 1))
            gf = g.to(c)
            grads = []
            for name, q in zip(_e.params, params):
                if q is None:
                    grads.append(g.new_empty((info.batch_size, 0)))
                    continue
                term = gf * normalized(torch, _e, xb.to(c), s.to(c)) if name == "weight" else gf
                grads.append((term.sum(dims) if dims else term).to(q.dtype))
            return (dx, *grads), (0,) * (1 + _p)

        torch.library.register_vmap(f"{ns}::{entry.name}", op_rule)
        if entry.fused_add:
            torch.library.register_vmap(f"{ns}::{entry.add_name}", add_rule)
            torch.library.register_vmap(f"{ns}::{entry.add_name}_", add_inplace_rule)
        torch.library.register_vmap(f"{ns}::{entry.forward_name}", forward_rule)
        torch.library.register_vmap(f"{ns}::{entry.backward_name}", backward_rule)
