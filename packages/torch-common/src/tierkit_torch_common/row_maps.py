"""The row maps' Python side (the op table's third kind, ``ROW_MAPS``)
for any namespace that defines them (``tierkit``,
``tierkit_stable``), written once for the kind and instantiated per entry:
autograd (reverse and forward mode, double backward) and the entry's
formulas over torch (what tests compare with and what a graph of the
backward differentiates). Checks, fakes, faces, vmap rules and DTensor
strategies are every row op's (``row_ops.py``); kernels are each tier's (core's
``tierkit/row_maps.h``). torch is imported by the caller.

The map is linear in x: x's gradient is the transposed map, the
``_<name>_backward`` kernel, unless a graph of the backward is wanted
(create_graph), when the entry's derivative formulas run on torch's ops.
The tables' gradients (rare: cos and sin are usually buffers) are the
formulas always.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from tierkit_core.op_table import ROW_MAPS, RowMap

from .row_ops import row_op_checks

__all__ = [
    "formulas",
    "register_row_map_autograd",
]


# ---- the formulas over torch ------------------------------------------------------


def formulas(torch: Any, entry: RowMap, flag: bool, r: int) -> dict[str, Callable[..., Any]]:
    """The formula vocabulary of the kind over torch for width r; `flag`: the
    entry's one flag (rotate's pairs are (2i, 2i + 1) where set, the halves' otherwise)."""

    def mapped(t: Any) -> Any:
        return t[..., :r]

    def rotate(v: Any) -> Any:
        if flag:  # the entry's flag set: (a, b) -> (-b, a) per pair (2i, 2i + 1)
            pairs = v.unflatten(-1, (-1, 2))
            return torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
        half = v.shape[-1] // 2
        return torch.cat((-v[..., half:], v[..., :half]), -1)

    def rotate_t(u: Any) -> Any:  # the transpose: (a, b) -> (b, -a)
        if flag:
            pairs = u.unflatten(-1, (-1, 2))
            return torch.stack((pairs[..., 1], -pairs[..., 0]), -1).flatten(-2)
        half = u.shape[-1] // 2
        return torch.cat((u[..., half:], -u[..., :half]), -1)

    def sum_to(t: Any, like: Any) -> Any:
        return t.sum_to_size(like.shape)

    return {"mapped": mapped, "rotate": rotate, "rotate_t": rotate_t, "sum_to": sum_to}


def _eval(entry: RowMap, formula: str, names: dict[str, Any]) -> Any:
    return eval(compile(formula, f"<{entry.name}>", "eval"), {"__builtins__": {}}, names)


def _whole(torch: Any, mapped: Any, rest: Any) -> Any:
    """The first r columns computed, the rest passed through."""
    return mapped if rest.shape[-1] == 0 else torch.cat((mapped, rest.to(mapped.dtype)), -1)


def reference(torch: Any, entry: RowMap, x: Any, tables: Sequence[Any], flag: bool) -> Any:
    """The entry's value by its formula on torch's ops (differentiable), in the inputs' dtypes."""
    r = tables[0].shape[-1]
    names: dict[str, Any] = {**formulas(torch, entry, flag, r), "x": x}
    names.update(zip(entry.tables, tables))
    return _whole(torch, _eval(entry, entry.reference, names), x[..., r:])


def gradients(
    torch: Any,
    entry: RowMap,
    grad: Any,
    x: Any,
    tables: Sequence[Any],
    flag: bool,
    wanted: Sequence[bool],
) -> list[Any]:
    """x's and each table's gradient by the entry's formulas (None where not wanted), each in its input's dtype."""
    r = tables[0].shape[-1]
    names: dict[str, Any] = {**formulas(torch, entry, flag, r), "x": x, "grad": grad}
    names.update(zip(entry.tables, tables))
    out: list[Any] = [None] * (1 + len(tables))
    if wanted[0]:
        out[0] = _whole(torch, _eval(entry, entry.derivatives["x"], names), grad[..., r:]).to(x.dtype)
    for i, (name, t) in enumerate(zip(entry.tables, tables)):
        if wanted[i + 1]:
            out[i + 1] = _eval(entry, entry.derivatives[name], names).to(t.dtype)
    return out


# ---- checks -------------------------------------------------------------------------


# ---- registrations -------------------------------------------------------------------


def _needs_derivative(torch: Any, tensors: Sequence[Any]) -> bool:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return True
    fw = torch.autograd.forward_ad
    return fw._current_level >= 0 and any(fw.unpack_dual(t).tangent is not None for t in tensors)


def _function(torch: Any, ns: str, entry: RowMap) -> type:
    ops = getattr(torch.ops, ns)
    op = getattr(ops, entry.name).default
    backward_op = getattr(ops, entry.backward_name).default
    n = len(entry.tables)

    class MapFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, *rest: Any) -> Any:
            tables, flags = rest[:n], rest[n:]
            with torch._C._AutoDispatchBelowAutograd():
                y = op(x, *tables, *flags)
            ctx.save_for_backward(x, *tables)
            ctx.save_for_forward(x, *tables)
            ctx.flags = flags
            return y

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple:
            x, *tables = ctx.saved_tensors
            needs = ctx.needs_input_grad
            wanted = list(needs[: 1 + n])
            if torch.is_grad_enabled():  # create_graph: the formulas on torch's ops, differentiable
                grads = gradients(torch, entry, grad, x, tables, ctx.flags[0], wanted)
            else:
                grads = gradients(torch, entry, grad, x, tables, ctx.flags[0], [False, *wanted[1:]])
                if wanted[0]:
                    with torch._C._AutoDispatchBelowAutograd():
                        grads[0] = backward_op(grad.contiguous(), *tables, *ctx.flags).to(x.dtype)
            return (*grads, *([None] * len(ctx.flags)))

        @staticmethod
        def jvp(ctx: Any, tx: Any, *tangents: Any) -> Any:
            x, *tables = ctx.saved_tensors
            tans = tangents[:n]
            out = None
            if tx is not None:
                with torch._C._AutoDispatchBelowAutograd():
                    out = op(tx, *tables, *ctx.flags)
            if any(t is not None for t in tans):
                # Linear in each table: the formula with that table's tangent in its place, the others zero.
                for i, t in enumerate(tans):
                    if t is None:
                        continue
                    args = [torch.zeros_like(q) if j != i else t for j, q in enumerate(tables)]
                    r = tables[0].shape[-1]
                    names = {**formulas(torch, entry, ctx.flags[0], r), "x": x}
                    names.update(zip(entry.tables, args))
                    term = _whole(torch, _eval(entry, entry.reference, names), torch.zeros_like(x[..., r:]))
                    out = term if out is None else out + term
            return out

    MapFunction.__name__ = MapFunction.__qualname__ = (
        "".join(w.title() for w in entry.name.split("_")) + "Function"
    )
    return MapFunction


def register_row_map_autograd(torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any) -> None:
    """Autograd for every row map in `ns` (kernels: the tier's; fakes and
    vmap: row_ops), for a namespace without its own (tierkit:: has C++
    autograd: csrc/row_map_autograd.cpp)."""
    check, _ = row_op_checks(torch, accepted_dtypes)
    ops = getattr(torch.ops, ns)
    for entry in ROW_MAPS:
        n = len(entry.tables)
        fn = _function(torch, ns, entry)
        op = getattr(ops, entry.name).default
        backward_op = getattr(ops, entry.backward_name).default
        name = f"{ns}::{entry.name}"
        bname = f"{ns}::{entry.backward_name}"

        def autograd_kernel(x, *rest, _e=entry, _n=n, _fn=fn, _op=op, _name=name, **kwargs):
            args = _positional(_e, rest, kwargs)
            if not _needs_derivative(torch, (x, *args[:_n])):
                with torch._C._AutoDispatchBelowAutograd():
                    return _op(x, *args)
            check(_name, _e, x, args[:_n])
            if torch._C._are_functorch_transforms_active():
                raise RuntimeError(
                    f"{_name}: torch.func transforms that differentiate (grad, vjp, jvp, jacrev, jacfwd, hessian) "
                    "are not supported: this op's autograd is registered from Python and runs below torch.func. "
                    "Use torch.autograd.grad / torch.autograd.forward_ad (both supported); vmap without "
                    "differentiation works."
                )
            return _fn.apply(x, *args)

        def autograd_backward(grad, *rest, _n=n, _op=backward_op, _name=bname, _e=entry, **kwargs):
            rest = _positional(_e, rest, kwargs)
            if _needs_derivative(torch, (grad, *rest[:_n])):
                raise RuntimeError(
                    f"{_name}: not differentiable (a building block of {ns}::{_e.name}'s autograd; an argument "
                    f"requires grad or carries a tangent); its double backward differentiates the formulas instead"
                )
            with torch._C._AutoDispatchBelowAutograd():
                return _op(grad, *rest)

        lib.impl(entry.name, autograd_kernel, "Autograd")
        lib.impl(entry.backward_name, autograd_backward, "Autograd")


def _positional(entry: RowMap, rest: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The tables and flags in schema order, whether passed by position, by name or left to their defaults."""
    names = [*entry.tables, *(f for f, _ in entry.flags)]
    defaults = {f: d for f, d in entry.flags}
    out = list(rest)
    for name in names[len(rest) :]:
        out.append(kwargs[name] if name in kwargs else defaults[name])
    return tuple(out)
