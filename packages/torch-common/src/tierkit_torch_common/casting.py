"""The norms' casting modes (``offset`` and ``casting_mode``, the op table's
``CASTING_MODES``) for any namespace that defines the row reductions: each
``.casting`` overload of an entry with ``casting`` is registered as a
CompositeImplicitAutograd kernel over the entry's plain overload and torch's
ops, for every backend at once. So autograd (both modes), vmap, DTensor,
autocast, ``torch.compile``, ``torch.export`` and AOTInductor see the plain op
and what surrounds it; no tier writes a mode's arithmetic again.

A mode is the plain op (aten's: x-hat times the weight in the compute type,
rounded once to x's dtype) with the weight and one product arranged:

* ``weight_in == "weight"``: the weight is ``weight + offset`` in the
  weight's dtype (torch's ``weight + offset``); ``"compute"``: in the compute
  type (``offset + weight.float()``: Gemma's);
* ``rounds_normalized``: the plain op runs without the weight, so x-hat is
  rounded to x's dtype, and the weight multiplies after, in
  ``torch.result_type(weight, x)`` (Llama's ``weight * x_hat.to(dtype)``).

The cost is the extra pass the arrangement makes (measured in the bench's
rows section against "aten").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS, CastingMode, RowReduction

from .row_ops import row_op_checks
from .rows import _split, compute_dtype

__all__ = ["arrange", "casting_mode", "register_row_casting"]

_MODE_NAMES = ", ".join(f'"{m.name}"' for m in CASTING_MODES[:-1]) + f' or "{CASTING_MODES[-1].name}"'


def casting_mode(op: str, name: Any) -> CastingMode:
    """The mode named `name`, or the error a bad one gets."""
    for mode in CASTING_MODES:
        if mode.name == name:
            return mode
    raise RuntimeError(f"{op}: casting_mode: expected {_MODE_NAMES}, got {name!r}")


def arrange(
    torch: Any, op: str, entry: RowReduction, x: Any, params: Sequence[Any], offset: float, name: Any
) -> tuple[tuple[Any, ...], Any]:
    """(the parameters the plain overload gets, the weight that multiplies
    its result after, or None) for a call in mode `name` with `offset`."""
    mode = casting_mode(op, name)
    if not isinstance(offset, (int, float)) or isinstance(offset, bool):
        raise RuntimeError(f"{op}: offset: expected a real number, got {type(offset).__name__}")
    weight, rest = params[0], tuple(params[1:])
    if weight is None:
        if offset != 0:
            raise RuntimeError(
                f"{op}: offset: expected 0.0 without a weight (the offset is added to the weight), got {offset!r}"
            )
        return (None, *rest), None
    if mode.weight_in == "compute":
        weight = weight.to(compute_dtype(torch, x, params)) + offset
    elif offset != 0:
        weight = weight + offset
    # Rounding x-hat to x's dtype is exact where x is in its compute type (float32,
    # float64): with a weight of x's dtype the mode is then aten's bit for bit, and
    # one pass instead of the norm and a product (csrc/row_casting.cpp agrees).
    exact = weight.dtype == x.dtype and x.dtype in (torch.float32, torch.float64)
    if mode.rounds_normalized and not exact:
        return (None, *rest), weight
    return (weight, *rest), None


def register_row_casting(
    torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any, composites: bool = True
) -> None:
    """The ``.casting`` overloads of every entry with ``casting`` in `ns`,
    as composites of its plain overloads (the plain op's checks run first, so
    a bad argument is named as the plain op names it), and their batch rules.
    ``composites=False``: the namespace's library registers the composites
    itself (tierkit::, in C++: csrc/row_casting.cpp), only the batch rules here."""
    check, same = row_op_checks(torch, accepted_dtypes)
    ops = getattr(torch.ops, ns)

    for entry in ROW_REDUCTIONS:
        if not entry.casting:
            continue
        p = len(entry.params)

        def arranged(overload, x, residual, rest, offset, casting_mode, _e=entry, _p=p):
            """The overload's checks, then the plain call's parameters and
            eps and the product after it (arrange)."""
            name = f"{ns}::{overload}"
            params, eps = _split(rest, _p, _e.eps)
            check(name, _e, x, params)
            if residual is not None:
                same(name, residual, "residual", x)
            return (*arrange(torch, name, _e, x, params, offset, casting_mode), eps)

        def op(x, *rest, offset=0.0, casting_mode="aten", _e=entry, _arranged=arranged):
            inner, after, eps = _arranged(_e.name, x, None, rest, offset, casting_mode)
            y = getattr(ops, _e.name).default(x, *inner, eps)
            return y if after is None else after * y

        def add(x, residual, *rest, offset=0.0, casting_mode="aten", _e=entry, _arranged=arranged):
            inner, after, eps = _arranged(_e.add_name, x, residual, rest, offset, casting_mode)
            y, h = getattr(ops, _e.add_name).default(x, residual, *inner, eps)
            return (y if after is None else after * y), h

        def add_(x, residual, *rest, offset=0.0, casting_mode="aten", _e=entry, _arranged=arranged):
            inner, after, eps = _arranged(_e.add_name + "_", x, residual, rest, offset, casting_mode)
            if after is not None:
                # The call writes h into `residual` before the product reads
                # the weight: one that lives in it (residual[0]) is read as
                # called, from a copy (a weight's worth: one row).
                after = after.clone()
            y = getattr(ops, _e.add_name + "_").default(x, residual, *inner, eps)
            return y if after is None else after * y

        kernels: dict[str, Callable[..., Any]] = {entry.name: op}
        if entry.fused_add:
            kernels.update({entry.add_name: add, entry.add_name + "_": add_})
        for name, fn in kernels.items():
            if composites:
                lib.impl(f"{name}.casting", fn, "CompositeImplicitAutograd")
            # vmap does not decompose a composite (it would take the slow
            # fallback), so each overload has a batch rule of its own.
            torch.library.register_vmap(
                f"{ns}::{name}.casting", _batch_rule(torch, ns, entry, name, fn), lib=lib
            )


def _batch_rule(torch: Any, ns: str, entry: RowReduction, name: str, fn: Any) -> Any:
    """The batch becomes one more leading (row) dim. A batched weight applies
    per example after the norm without it: in the compute type, rounded once
    (x-hat times the weight, as the kernel rounds), or after x-hat is rounded
    where the mode rounds it (Llama's)."""
    p = len(entry.params)
    lead = 1 if name == entry.name else 2  # x, or x and residual
    in_place = name == entry.add_name + "_"

    def front(info: Any, t: Any, dim: Any) -> Any:
        return t.unsqueeze(0).expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)

    def rule(info: Any, in_dims: Any, *args: Any, offset: float = 0.0, casting_mode: str = "aten") -> Any:
        dims = list(in_dims) + [None] * (len(args) - len(in_dims))
        op = f"{ns}::{name}"
        if in_place and dims[1] is None:
            raise RuntimeError(
                f"vmap: {op}.casting writes into `residual`, which is not batched while x is: "
                "pass a batched residual"
            )
        tensors = [front(info, t, d) for t, d in zip(args[:lead], dims[:lead])]
        params, eps = _split(args[lead:], p, entry.eps)
        pdims = dims[lead : lead + p]
        if all(d is None for d in pdims):
            return fn(*tensors, *params, eps, offset=offset, casting_mode=casting_mode), (
                0 if lead == 1 else (0, 0) if not in_place else 0
            )
        if lead == 2:
            raise RuntimeError(
                f"vmap: {op}.casting over a batched parameter is not supported; vmap {entry.name} over h = x + residual"
            )
        x = tensors[0]
        batched = []
        for pname, q, d in zip(entry.params, params, pdims):
            if d is not None:
                q = q.movedim(d, 0)
                if q.dim() != 2 or q.shape[-1] != x.shape[-1]:
                    raise RuntimeError(
                        f"{op}: {pname}: expected shape [{x.shape[-1]}] per example (x's last dimension), "
                        f"got {list(q.shape[1:])}"
                    )
                q = q.reshape(q.shape[0], *([1] * (x.dim() - 2)), q.shape[-1])
            batched.append(q)
        plain = getattr(getattr(torch.ops, ns), entry.name).default
        inner, after = arrange(torch, op, entry, x, batched, offset, casting_mode)
        if after is not None:
            return after * plain(x, None, eps), 0
        c = compute_dtype(torch, x, params)
        y = plain(x.to(c), None, eps)
        return (y * inner[0].to(c)).to(x.dtype), 0

    return rule
