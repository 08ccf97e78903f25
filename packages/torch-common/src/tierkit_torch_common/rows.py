"""The row reductions' Python side for any namespace that defines them
(``tierkit``: torch-cpu, ``tierkit_stable``: torch-stable), written once for
the op table's kind and instantiated per entry (``ROW_REDUCTIONS``): typed
faces, fake kernels, vmap rules, DTensor strategies, the checks' messages,
and the entry's reference formula over torch (what tests compare with and
what torch-stable's autograd differentiates). Kernels are each tier's. See
docs/reductions.md. torch is imported by the caller, this module only
receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from tierkit_core import row_rules as rules
from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS, RowReduction
from tierkit_core.op_testing import evaluate_row, row_names

from ._words import ask as _ask
from ._words import dtype_name, one_of
from .fake import _bound_on_first_call

__all__ = [
    "compute_dtype",
    "default_eps",
    "gradients",
    "reference",
    "register_row_fakes",
    "register_row_sharding",
    "register_row_vmap",
    "row_checks",
    "row_faces",
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


# ---- checks -------------------------------------------------------------------


def row_checks(torch: Any, accepted_dtypes: Sequence[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    """The row reductions' argument checks, with the C++ kernels' messages
    (torch-cpu's include/tierkit_torch/rows.h): ``check(op, entry, x,
    params)`` and ``same(op, t, name, x)`` (t has x's dtype and shape). The
    fake kernels use them, and so does the stable tier's Python autograd,
    which must refuse a bad call before its differentiable path runs."""
    accepted = tuple(getattr(torch, n) for n in accepted_dtypes)
    accepted_text = one_of(list(accepted_dtypes))

    def check(op: str, entry: RowReduction, x: Any, params: Sequence[Any]) -> None:
        _ask(torch, op, rules.x_rank(x.dim(), "the last is normalised", rules.TORCH))
        if x.dtype not in accepted:
            raise RuntimeError(f"{op}: x: expected dtype {accepted_text}, got {dtype_name(x.dtype)}")
        for name, p in zip(entry.params, params):
            if p is None:
                continue
            if p.device != x.device:
                raise RuntimeError(f"{op}: {name}: expected device {x.device} (same as x), got {p.device}")
            if p.dtype not in accepted:  # any float dtype, as aten's: the output keeps x's
                raise RuntimeError(f"{op}: {name}: expected dtype {accepted_text}, got {dtype_name(p.dtype)}")
            _ask(torch, op, rules.param_shape(name, p.shape, x.shape[-1], rules.TORCH))

    def same(op: str, t: Any, name: str, x: Any) -> None:
        if t.dtype != x.dtype:
            raise RuntimeError(
                f"{op}: {name}: expected dtype {dtype_name(x.dtype)} (same as x), got {dtype_name(t.dtype)}"
            )
        torch._check(
            t.shape == x.shape,
            lambda: f"{op}: {name}: expected shape {list(x.shape)} (same as x), got {list(t.shape)}",
        )

    return check, same


# ---- fakes --------------------------------------------------------------------


def register_row_fakes(torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any = None) -> None:
    """Fake kernels for every overload of every row reduction in `ns`, with the
    C++ kernels' checks and messages: outputs contiguous in x's dtype, the
    stats of x's leading dims and the entry's count, in float32 (float64 for
    float64 x), each parameter's gradient like the parameter (empty when absent)."""
    check, same = row_checks(torch, accepted_dtypes)

    def fresh(x: Any) -> Any:
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    for entry in ROW_REDUCTIONS:

        def op(x: Any, *rest: Any, _e: RowReduction = entry) -> Any:
            check(f"{ns}::{_e.name}", _e, x, _split(rest, len(_e.params))[0])
            return fresh(x)

        def add(x: Any, residual: Any, *rest: Any, _e: RowReduction = entry) -> Any:
            check(f"{ns}::{_e.add_name}", _e, x, _split(rest, len(_e.params))[0])
            same(f"{ns}::{_e.add_name}", residual, "residual", x)
            return fresh(x), fresh(x)

        def add_(x: Any, residual: Any, *rest: Any, _e: RowReduction = entry) -> Any:
            check(f"{ns}::{_e.add_name}_", _e, x, _split(rest, len(_e.params))[0])
            same(f"{ns}::{_e.add_name}_", residual, "residual", x)
            return fresh(x)

        def forward(x: Any, *rest: Any, _e: RowReduction = entry) -> Any:
            check(f"{ns}::{_e.forward_name}", _e, x, _split(rest, len(_e.params))[0])
            dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
            return fresh(x), x.new_empty((*x.shape[:-1], len(_e.stats)), dtype=dtype)

        def backward(grad: Any, x: Any, *rest: Any, _e: RowReduction = entry) -> Any:
            params = _split(rest, len(_e.params))[0]
            check(f"{ns}::{_e.backward_name}", _e, x, params)
            same(f"{ns}::{_e.backward_name}", grad, "grad", x)
            grads = [torch.empty_like(q) if q is not None else x.new_empty((0,)) for q in params]
            return (fresh(x), *grads)

        kernels = {entry.name: op, entry.forward_name: forward, entry.backward_name: backward}
        if entry.fused_add:
            kernels.update({entry.add_name: add, entry.add_name + "_": add_})
        for name, fn in kernels.items():
            torch.library.register_fake(f"{ns}::{name}", fn, lib=lib)


# ---- typed faces --------------------------------------------------------------

_FACE = """\
def {name}({params}):
    return overload({args})
"""

# An entry with casting modes: the plain overload unless a mode or an offset is asked for.
_CASTING_FACE = """\
def {name}({params}, *, offset=0.0, casting_mode="aten"):
    if casting_mode == "aten" and offset == 0.0:
        return overload({args})
    return casting({args}, offset=offset, casting_mode=casting_mode)
"""

_CASTING_RULES = """

``offset`` (added to the weight) and ``casting_mode`` say how the weight
applies and where results round, by the convention a model was trained with:
{modes}."""

_KIND_RULES = """

Over the last dimension. ``eps`` defaults to {eps}. 16-bit inputs are
accumulated in float32; each row is reduced in one fixed order
(bit-identical results for any thread count and SIMD level).
{params_text} may have any float dtype (aten's rule: computed in float32, or
float64 where x or one of them is; the output in x's dtype, each gradient in
its input's). Differentiable in {differentiable}, in reverse and forward mode."""


def row_faces(ops: Any, prefix: str) -> dict[str, Callable[..., Any]]:
    """The typed face of every public overload of every row reduction over
    ``ops`` (torch.ops.<ns>): ``name(x, [residual,] weight=None, [bias=None,] eps=...)``."""
    faces: dict[str, Callable[..., Any]] = {}
    for entry in ROW_REDUCTIONS:
        eps_default = "None" if entry.eps is None else repr(entry.eps)
        params = ", ".join(f"{p}=None" for p in entry.params) + f", eps={eps_default}"
        names = ", ".join((*entry.params, "eps"))
        eps_text = "torch's (the compute type's machine epsilon)" if entry.eps is None else repr(entry.eps)
        params_text = " and ".join(f"``{p}``" for p in entry.params)
        rules = _KIND_RULES.format(
            eps=eps_text,
            params_text=params_text[0].upper() + params_text[1:],
            differentiable=", ".join(("``x``", *(f"``{p}``" for p in entry.params))),
        )
        overloads = [(entry.name, "x", f"``{entry.schema}``: {entry.doc}." + rules)]
        if entry.fused_add:
            overloads.append(
                (
                    entry.add_name,
                    "x, residual",
                    f"``({entry.name}(h, ...), h)`` with ``h = x + residual`` rounded to the dtype, as a model "
                    "computing ``x + residual`` itself would; one pass over memory. Differentiable in every "
                    "tensor.",
                )
            )
            overloads.append(
                (
                    entry.add_name + "_",
                    "x, residual",
                    f"In place (vLLM's in-place fused add): ``residual`` becomes ``h = x + residual``; "
                    f"returns ``{entry.name}(h, ...)``. Not differentiable (it writes into ``residual``); "
                    "functionalized under ``torch.compile``.",
                )
            )
        for name, lead, doc in overloads:
            template = _CASTING_FACE if entry.casting else _FACE
            source = template.format(name=name, params=f"{lead}, {params}", args=f"{lead}, {names}")
            scope: dict[str, Any] = {}
            # Bound on first call: the JIT build loads the library after import.
            scope["overload"] = _bound_on_first_call(scope, "overload", ops, name, "default")
            if entry.casting:
                scope["casting"] = _bound_on_first_call(scope, "casting", ops, name, "casting")
                modes = "; ".join(f'``"{m.name}"``: {m.doc}' for m in CASTING_MODES)
                doc += _CASTING_RULES.format(modes=modes)
            exec(compile(source, f"<tierkit op table: {name}>", "exec"), scope)
            face = scope[name]
            face.__doc__ = doc
            face.__module__ = prefix + ".ops"
            faces[name] = face
    return faces


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


# ---- DTensor ------------------------------------------------------------------


def register_row_sharding(torch: Any, ns: str) -> None:
    """Rows are independent: x (and residual, grad, the stats) sharded on any
    leading dim with replicated parameters needs no communication and keeps
    its placement; the parameters' gradients are then Partial sums. The
    normalised (last) dim must be whole: a shard of it is redistributed to
    Replicate first, so the values stay right."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding as on

    ops = getattr(torch.ops, ns)

    def rep(params: Sequence[Any]) -> list[Any]:
        return [None if q is None else Replicate() for q in params]

    for entry in ROW_REDUCTIONS:
        p = len(entry.params)

        def op_strategy(x, *rest, _p=p):
            ps = rep(_split(rest, _p)[0])
            out = [([Replicate()], [Replicate(), *ps, None])]
            return out + [([Shard(k)], [Shard(k), *ps, None]) for k in range(x.ndim - 1)]

        def add_strategy(x, residual, *rest, _p=p):
            ps = rep(_split(rest, _p)[0])
            out = [([Replicate(), Replicate()], [Replicate(), Replicate(), *ps, None])]
            return out + [([Shard(k), Shard(k)], [Shard(k), Shard(k), *ps, None]) for k in range(x.ndim - 1)]

        def forward_strategy(x, *rest, _p=p):
            ps = rep(_split(rest, _p)[0])
            out = [([Replicate(), Replicate()], [Replicate(), *ps, None])]
            return out + [([Shard(k), Shard(k)], [Shard(k), *ps, None]) for k in range(x.ndim - 1)]

        def backward_strategy(grad, x, *rest, _p=p):
            params = _split(rest, _p)[0]
            ps = rep(params)
            dps = [Replicate() if q is None else Partial() for q in params]
            out = [([Replicate()] * (1 + _p), [Replicate(), Replicate(), *ps, Replicate()])]
            return out + [([Shard(k), *dps], [Shard(k), Shard(k), *ps, Shard(k)]) for k in range(x.ndim - 1)]

        on(getattr(ops, entry.name).default)(op_strategy)
        if entry.fused_add:
            on(getattr(ops, entry.add_name).default)(add_strategy)
        on(getattr(ops, entry.forward_name).default)(forward_strategy)
        on(getattr(ops, entry.backward_name).default)(backward_strategy)
