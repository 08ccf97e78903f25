"""The row ops' Python adapter, one for every entry of the op table's
``ROW_OPS`` in any namespace that defines them (``tierkit``,
``tierkit_stable``), driven by each entry's argument roles (``RowArg``): the
argument checks (core's rules and words, ``tierkit_core.row_rules``), the
fake kernels of every overload, the typed faces, the vmap rules and the
DTensor strategies. The entries' formulas over torch are ``rows.py``'s and
``row_maps.py``'s (with the maps' Python autograd, torch-stable's). torch is imported by the caller, this module only receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from tierkit_core import row_rules as rules
from tierkit_core.op_table import CASTING_MODES, ROW_OPS, RowOp

from ._words import ask, dtype_name, one_of
from .fake import _bound_on_first_call
from .rows import _split, compute_dtype, default_eps, normalized

__all__ = [
    "check_dim",
    "in_place_checks",
    "in_place_names",
    "one_or_tuple",
    "register_row_op_fakes",
    "register_row_op_sharding",
    "register_row_op_vmap",
    "result_dtype",
    "row_op_checks",
    "row_op_faces",
    "scalar_default",
    "tensor_args",
]


def tensor_args(entry: RowOp) -> tuple[str, ...]:
    """The entry's tensors after x, in schema order (its parameters or its tables)."""
    return tuple(a.name for a in entry.args if a.role in ("param", "table"))


def in_place_names(entry: RowOp) -> dict[str, Any]:
    """An in-place entry's argument names by role (the op table's layout,
    which op_codegen checks: index, two written xs, table, size, flag):
    ``index``, ``written`` (the two xs), ``table``, ``size``, ``flag``."""
    by_role: dict[str, list[str]] = {}
    for a in entry.args:
        by_role.setdefault(a.role, []).append(a.name)
    return {
        "index": by_role["index"][0],
        "written": tuple(by_role["x"]),
        "table": by_role["table"][0],
        "size": by_role["size"][0],
        "flag": by_role["flag"][0],
    }


def in_place_checks(torch: Any, accepted_dtypes: Sequence[str]) -> Callable[..., None]:
    """An in-place entry's checks with the C++ kernels' messages (core's
    row_rules, the entry's names): ``check(op, entry, index, x, x2, table,
    size)``, the arguments by role: the fakes ask them. (Whether each index
    value lies in the table is the kernel's: it reads the values.)"""
    accepted = tuple(getattr(torch, n) for n in accepted_dtypes)
    accepted_text = one_of(list(accepted_dtypes))

    def check(op: str, entry: RowOp, index: Any, x: Any, x2: Any, table: Any, size: int) -> None:
        n = in_place_names(entry)
        x_name, x2_name = n["written"]
        if x.dtype not in accepted:
            raise RuntimeError(f"{op}: {x_name}: expected dtype {accepted_text}, got {dtype_name(x.dtype)}")
        for name, t in ((n["index"], index), (n["table"], table), (x2_name, x2)):
            if t is not None:
                ask(torch, op, rules.same_device(name, x_name, str(x.device), str(t.device)))
        ask(torch, op, rules.index_dtype(n["index"], dtype_name(index.dtype)))
        ask(torch, op, rules.gathered_dtype(n["table"], x_name, dtype_name(x.dtype), dtype_name(table.dtype)))
        ask(
            torch,
            op,
            rules.indexed_heads(x_name, x.shape, index.shape, n["index"], size, n["size"], rules.TORCH),
        )
        ask(torch, op, rules.gathered_table(n["table"], table.shape, size, n["size"], rules.TORCH))
        if x2 is None:
            return
        ask(torch, op, rules.same_dtype(x2_name, x_name, dtype_name(x.dtype), dtype_name(x2.dtype)))
        ask(
            torch,
            op,
            rules.indexed_heads(x2_name, x2.shape, index.shape, n["index"], size, n["size"], rules.TORCH),
        )

    return check


def result_dtype(torch: Any, x: Any, tables: Sequence[Any]) -> Any:
    """torch's promotion of x and the tables (every one a tensor of at least one dim)."""
    dtype = x.dtype
    for t in tables:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def scalar_default(entry: RowOp) -> Any:
    """What the op's trailing scalar is when a call leaves it out: its dim's -1, or its eps's default."""
    return entry.trailing(entry.eps)


def one_or_tuple(outs: Sequence[Any]) -> Any:
    """A schema's returns as torch gives them: one tensor alone, several as a tuple."""
    return outs[0] if len(outs) == 1 else tuple(outs)


def _result_dtype(torch: Any, entry: RowOp, x: Any, tensors: Sequence[Any]) -> Any:
    """x's dtype (a reduction: aten's norms' rule), or torch's promotion of x
    and the tables (a linear map)."""
    return x.dtype if entry.saves == "stats" else result_dtype(torch, x, tensors)


# ---- checks ---------------------------------------------------------------------


def check_dim(torch: Any, op: str, x: Any, dim: int) -> int:
    """The dim role's rule (core's words, as the kernels' along_dim): x has
    the dim (a 0-d x: -1 or 0, as aten's ops along a dim take it); returns it
    wrapped into [0, max(x.dim(), 1))."""
    ask(torch, op, rules.dim("dim", dim, x.dim(), rules.TORCH))
    return dim % max(x.dim(), 1)


def row_op_checks(
    torch: Any, accepted_dtypes: Sequence[str]
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The row ops' argument checks with the C++ kernels' messages:
    ``check(op, entry, x, tensors)`` (`tensors`: the entry's ``tensor_args``,
    None for an absent parameter) and ``same(op, t, name, x)`` (t has x's
    dtype and shape: a residual, a grad). The fake kernels use them, and so
    does the stable tier's Python autograd, which must refuse a bad call
    before its differentiable path runs."""
    accepted = tuple(getattr(torch, n) for n in accepted_dtypes)
    accepted_text = one_of(list(accepted_dtypes))

    def dtype(op: str, name: str, t: Any) -> None:
        if t.dtype not in accepted:  # any float dtype, as aten's: the output keeps x's
            raise RuntimeError(f"{op}: {name}: expected dtype {accepted_text}, got {dtype_name(t.dtype)}")

    def check(op: str, entry: RowOp, x: Any, tensors: Sequence[Any]) -> None:
        why = "the last is normalised" if entry.saves == "stats" else None
        ask(torch, op, rules.x_rank(x.dim(), why, rules.TORCH))
        dtype(op, "x", x)
        roles = [a for a in entry.args if a.role in ("param", "table")]
        for arg, t in zip(roles, tensors):
            if t is None:
                continue
            if t.device != x.device:
                raise RuntimeError(
                    f"{op}: {arg.name}: expected device {x.device} (same as x), got {t.device}"
                )
            dtype(op, arg.name, t)
            if arg.role == "param":
                ask(torch, op, rules.param_shape(arg.name, t.shape, x.shape[-1], rules.TORCH))
            else:
                ask(torch, op, rules.table_rank(arg.name, t.dim(), rules.TORCH))
        if entry.tables:
            sizes = [t.shape for t in tensors]
            ask(torch, op, rules.tables_fit(x.shape, sizes, entry.tables, entry.width_rule, rules.TORCH))

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


# ---- fakes ----------------------------------------------------------------------


def register_row_op_fakes(torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any = None) -> None:
    """Fake kernels for every overload of every row op in `ns`, with the C++
    kernels' checks and messages: outputs contiguous, in x's dtype (a
    reduction) or the promotion of x and the tables (a map); a reduction's
    stats of x's leading dims and the entry's count, in float32 (float64 for
    float64 x), each parameter's gradient like the parameter (empty when
    absent); a map's transposed map (its backward) like its forward."""
    check, same = row_op_checks(torch, accepted_dtypes)

    def fresh(x: Any, dtype: Any = None) -> Any:
        return torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)

    def tensors(entry: RowOp, rest: Sequence[Any]) -> list[Any]:
        """The entry's tensors among `rest` (the arguments after x), absent parameters None."""
        n = len(tensor_args(entry))
        return [*rest[:n], *([None] * (n - len(rest[:n])))]

    check_in_place = in_place_checks(torch, accepted_dtypes)
    for entry in ROW_OPS:
        if entry.saves == "none":  # written in place: the checks, and nothing returned

            def in_place(index, x, x2, table, size, flag, _e=entry):
                check_in_place(f"{ns}::{_e.name}", _e, index, x, x2, table, size)

            torch.library.register_fake(f"{ns}::{entry.name}", in_place, lib=lib)
            continue

        def op(x: Any, *rest: Any, _e: RowOp = entry) -> Any:
            ts = tensors(_e, rest)
            rows = x
            if _e.has_dim:  # the last-dim op on x moved: the same shape and dtype
                check_dim(torch, f"{ns}::{_e.name}", x, rest[-1] if rest else -1)
                rows = x.reshape(1) if x.dim() == 0 else x  # a 0-d x: one row of one element
            check(f"{ns}::{_e.name}", _e, rows, ts)
            return fresh(x, _result_dtype(torch, _e, x, ts))

        def add(x: Any, residual: Any, *rest: Any, _e: RowOp = entry) -> Any:
            check(f"{ns}::{_e.add_name}", _e, x, tensors(_e, rest))
            same(f"{ns}::{_e.add_name}", residual, "residual", x)
            return fresh(x), fresh(x)

        def add_(x: Any, residual: Any, *rest: Any, _e: RowOp = entry) -> Any:
            check(f"{ns}::{_e.add_name}_", _e, x, tensors(_e, rest))
            same(f"{ns}::{_e.add_name}_", residual, "residual", x)
            return fresh(x)

        def forward(x: Any, *rest: Any, _e: RowOp = entry) -> Any:
            check(f"{ns}::{_e.forward_name}", _e, x, tensors(_e, rest))
            dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
            return fresh(x), x.new_empty((*x.shape[:-1], len(_e.stats)), dtype=dtype)

        def backward(grad: Any, *rest: Any, _e: RowOp = entry) -> Any:
            if _e.saves == "linear":  # the transposed map: (grad, tables..., flags...)
                ts = tensors(_e, rest)
                check(f"{ns}::{_e.backward_name}", _e, grad, ts)
                # As the kernels: the promotion of grad and the tables (a
                # float32 table makes a bfloat16 grad's gradient float32).
                return fresh(grad, _result_dtype(torch, _e, grad, ts))
            x, params = rest[0], tensors(_e, rest[1:])
            check(f"{ns}::{_e.backward_name}", _e, x, params)
            same(f"{ns}::{_e.backward_name}", grad, "grad", x)
            grads = [torch.empty_like(q) if q is not None else x.new_empty((0,)) for q in params]
            return one_or_tuple([fresh(x), *grads])

        kernels: dict[str, Callable[..., Any]] = {entry.name: op, entry.backward_name: backward}
        if entry.saves == "stats":
            kernels[entry.forward_name] = forward
        if entry.fused_add:
            kernels.update({entry.add_name: add, entry.add_name + "_": add_})
        for name, fn in kernels.items():
            torch.library.register_fake(f"{ns}::{name}", fn, lib=lib)


# ---- typed faces ----------------------------------------------------------------

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

# What each role adds to a face's documentation.
_PARAM_RULES = """

Over the last dimension. ``eps`` defaults to {eps}. 16-bit inputs are
accumulated in float32; each row is reduced in one fixed order
(bit-identical results for any thread count and SIMD level).
{params_text} may have any float dtype (aten's rule: computed in float32, or
float64 where x or one of them is; the output in x's dtype, each gradient in
its input's). Differentiable in {differentiable}, in reverse and forward mode."""

_DIM_RULES = """

Along ``dim`` (any dim, wrapped as torch wraps one; a 0-d x is one row of
one element; the result contiguous).
16-bit inputs are computed in float32 and rounded once; each row is reduced
in one fixed order (bit-identical results for any thread count and SIMD
level). Differentiable in ``x``, in reverse and forward mode."""

_IN_PLACE_RULES = """

{x} and {x2} are written in place, nothing returned; not differentiable
(call it under torch.no_grad() or torch.inference_mode()). Every value of
{index} is checked to lie in {table} before anything is written. {table}
may have {x}'s dtype or its compute type (a float32 table beside bfloat16
activations); 16-bit values are computed in float32 and rounded once."""

_TABLE_RULES = """

r = {first}.size(-1) must be {width_rule}; {tables} have r columns and
broadcast against x[..., :r] (e.g. [seq, r] against [batch, heads, seq,
head_dim]). The output has torch's promotion of the inputs' dtypes (16-bit
inputs computed in float32 and rounded once). Differentiable in every
tensor, in reverse and forward mode; x's gradient is the transposed map."""


def _default(arg: Any) -> str:
    if arg.role == "param":
        return f"{arg.name}=None"
    if arg.role in ("table", "x", "index", "size") or (arg.role == "flag" and arg.default is None):
        return arg.name
    return f"{arg.name}={arg.default!r}"


def _rules(entry: RowOp) -> str:
    if entry.saves == "none":
        n = in_place_names(entry)
        return _IN_PLACE_RULES.format(
            x=n["written"][0], x2=n["written"][1], index=n["index"], table=n["table"]
        )
    if entry.has_dim:
        return _DIM_RULES
    if entry.tables:
        return _TABLE_RULES.format(
            first=entry.tables[0], width_rule=entry.width_rule, tables=" and ".join(entry.tables)
        )
    eps_text = "torch's (the compute type's machine epsilon)" if entry.eps is None else repr(entry.eps)
    params_text = " and ".join(f"``{p}``" for p in entry.params)
    return _PARAM_RULES.format(
        eps=eps_text,
        params_text=params_text[0].upper() + params_text[1:],
        differentiable=", ".join(("``x``", *(f"``{p}``" for p in entry.params))),
    )


def row_op_faces(ops: Any, prefix: str) -> dict[str, Callable[..., Any]]:
    """The typed face of every public overload of every row op over ``ops``
    (torch.ops.<ns>): ``name(x, [residual,] <its arguments with their defaults>)``."""
    faces: dict[str, Callable[..., Any]] = {}
    for entry in ROW_OPS:
        params = ", ".join(_default(a) for a in entry.args)
        names = ", ".join(a.name for a in entry.args)
        doc = f"``{entry.schema}``: {entry.doc}." + _rules(entry)
        if entry.saves == "none":  # its x arguments are among its args
            faces[entry.name] = _face(ops, prefix, entry.name, params, names, doc)
            continue
        overloads = [(entry.name, "x", doc)]
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
            faces[name] = _face(
                ops, prefix, name, f"{lead}, {params}", f"{lead}, {names}", doc, entry.casting
            )
    return faces


def _face(ops: Any, prefix: str, name: str, params: str, args: str, doc: str, casting: bool = False) -> Any:
    """One typed face: ``name(<params>)`` calling the overload with ``<args>``."""
    source = (_CASTING_FACE if casting else _FACE).format(name=name, params=params, args=args)
    scope: dict[str, Any] = {}
    # Bound on first call: the JIT build loads the library after import.
    scope["overload"] = _bound_on_first_call(scope, "overload", ops, name, "default")
    if casting:
        scope["casting"] = _bound_on_first_call(scope, "casting", ops, name, "casting")
        modes = "; ".join(f'``"{m.name}"``: {m.doc}' for m in CASTING_MODES)
        doc += _CASTING_RULES.format(modes=modes)
    exec(compile(source, f"<tierkit op table: {name}>", "exec"), scope)
    face = scope[name]
    face.__doc__ = doc
    face.__module__ = prefix + ".ops"
    return face


# ---- vmap ---------------------------------------------------------------------


def register_row_op_vmap(torch: Any, ns: str, lib: Any = None) -> None:
    """Batch rules for every batch dim of every row op, by role: the batch
    becomes one more leading (row) dim of x; a batched table moves its batch
    to the front and broadcasts per example (its other dims aligned to x's
    from the right); batched parameters apply per example after the op
    without them (it is affine in them), in the compute type, so a 16-bit
    result is rounded once, as a per-example call's."""
    ops = getattr(torch.ops, ns)

    def front(info: Any, t: Any, dim: int | None) -> Any:
        return t.unsqueeze(0).expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)

    def per_example(t: Any, dim: int | None, ndim: int) -> Any:
        if dim is None:
            return t
        t = t.movedim(dim, 0)
        return t.reshape(t.shape[0], *([1] * (ndim - 2)), t.shape[-1])

    def normalized_then_affine(
        x: Any, entry: RowOp, params: Sequence[Any], dims: Sequence[int | None], eps: Any
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

    def with_tables(info: Any, in_dims: Any, op: Any, n: int, x: Any, rest: Sequence[Any]) -> Any:
        """`op` (the map, or its transpose) on x batched and its first n arguments, tables, per example."""
        dims = dims_of(in_dims, 0, 1 + len(rest))
        x = front(info, x, dims[0])
        tables = []
        for t, d in zip(rest[:n], dims[1 : 1 + n]):
            if d is not None:
                t = t.movedim(d, 0)
                t = t.reshape(t.shape[0], *([1] * (x.dim() - t.dim())), *t.shape[1:])
            tables.append(t)
        return op(x, *tables, *rest[n:]), 0

    for entry in ROW_OPS:
        if entry.saves == "none":
            continue  # written in place: vmap's own fallback (a loop over examples) serves
        p = len(tensor_args(entry))
        none = (None,) * p

        def op_rule(info, in_dims, x, *rest, _e=entry, _p=p):
            if _e.tables:
                return with_tables(info, in_dims, getattr(ops, _e.name).default, _p, x, rest)
            params, eps = _split(rest, _p, scalar_default(_e))
            if _e.has_dim:  # the example's dim, checked as a call without vmap would be, past the batch dim
                example = x if in_dims[0] is None else x.select(in_dims[0], 0)
                check_dim(torch, f"{ns}::{_e.name}", example, eps)
                if example.dim() == 0:  # 0-d examples: the batch is rows of one element
                    return getattr(ops, _e.name).default(
                        front(info, x, in_dims[0]).unsqueeze(-1), -1
                    ).squeeze(-1), 0
                eps = eps if eps < 0 else eps + 1
            pd = dims_of(in_dims, 1, _p)
            x = front(info, x, in_dims[0])
            if all(d is None for d in pd):
                return getattr(ops, _e.name).default(x, *params, eps), 0
            return normalized_then_affine(x, _e, params, pd, eps), 0

        if entry.saves == "linear":

            def transposed_rule(info, in_dims, grad, *rest, _e=entry, _p=p):
                return with_tables(info, in_dims, getattr(ops, _e.backward_name).default, _p, grad, rest)

            torch.library.register_vmap(f"{ns}::{entry.name}", op_rule, lib=lib)
            torch.library.register_vmap(f"{ns}::{entry.backward_name}", transposed_rule, lib=lib)
            continue

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

        def unbatched(name: str, in_dims: Sequence[Any], start: int, n: int, e: RowOp) -> None:
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
            out = getattr(ops, _e.backward_name).default(g, xb, *params, s)
            dx = out[0] if isinstance(out, tuple) else out
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
            return one_or_tuple([dx, *grads]), one_or_tuple([0] * (1 + _p))

        torch.library.register_vmap(f"{ns}::{entry.name}", op_rule, lib=lib)
        if entry.fused_add:
            torch.library.register_vmap(f"{ns}::{entry.add_name}", add_rule, lib=lib)
            torch.library.register_vmap(f"{ns}::{entry.add_name}_", add_inplace_rule, lib=lib)
        torch.library.register_vmap(f"{ns}::{entry.forward_name}", forward_rule, lib=lib)
        torch.library.register_vmap(f"{ns}::{entry.backward_name}", backward_rule, lib=lib)


# ---- DTensor --------------------------------------------------------------------


def register_row_op_sharding(torch: Any, ns: str) -> None:
    """Rows are independent: x (and residual, grad, the stats) sharded on any
    leading dim keeps its placement, with no communication, given each other
    argument by its role: a parameter replicated (its gradient then a Partial
    sum), a table sharded where it has that dim and replicated where it
    broadcasts, eps and flags none. The last dim must be whole: a shard of
    it is redistributed to Replicate first, so the values stay right."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding as on

    ops = getattr(torch.ops, ns)

    def placed(entry: RowOp, x: Any, rest: Sequence[Any], k: int | None) -> list[Any]:
        """The placements of `rest` (the arguments after the rows) for x sharded on dim k (None: replicated)."""
        out: list[Any] = []
        for i, arg in enumerate(entry.args):
            if i >= len(rest) and arg.role == "flag":
                break  # a flag left to its default has no placement; a parameter or eps left out has None
            v: Any = rest[i] if i < len(rest) else None
            if arg.role == "param":
                out.append(None if v is None else Replicate())
            elif arg.role == "table":
                kt = None if k is None else k - (len(x.shape) - len(v.shape))
                out.append(Shard(kt) if kt is not None and kt >= 0 and v.shape[kt] != 1 else Replicate())
            else:
                out.append(None)
        return out

    def strategies(entry: RowOp, x: Any, rows: int, rest: Sequence[Any], outputs: Callable[[Any], list[Any]]):
        """Every placement: replicated, or sharded on a dim the op does not
        run along (a leading dim, or any but ``dim``); `rows` leading
        arguments shard like x, `outputs(placement)` gives the outputs'."""
        out = [(outputs(Replicate()), [*([Replicate()] * rows), *placed(entry, x, rest, None)])]
        along = len(x.shape) - 1
        if entry.has_dim and rest:
            along = rest[-1] % max(len(x.shape), 1)  # a 0-d x: no dim to shard
        for k in (k for k in range(len(x.shape)) if k != along):
            out.append((outputs(Shard(k)), [*([Shard(k)] * rows), *placed(entry, x, rest, k)]))
        return out

    for entry in ROW_OPS:
        if entry.saves == "none":
            continue  # written in place: no strategy (DTensor redistributes to replicate)

        def op_strategy(x, *rest, _e=entry):
            return strategies(_e, x, 1, rest, lambda p: [p])

        def add_strategy(x, residual, *rest, _e=entry):
            return strategies(_e, x, 2, rest, lambda p: [p, p])

        def forward_strategy(x, *rest, _e=entry):
            return strategies(_e, x, 1, rest, lambda p: [p, p])

        def backward_strategy(grad, *rest, _e=entry):
            if _e.saves == "linear":  # (grad, tables..., flags...) -> dx
                return strategies(_e, grad, 1, rest, lambda p: [p])
            x, params = rest[0], rest[1:-1]  # (grad, x, params..., stats) -> (dx, dparams...)
            dps = [Replicate() if q is None else Partial() for q in params]

            def outputs(p: Any) -> list[Any]:
                return [p, *(dps if isinstance(p, Shard) else [Replicate()] * len(params))]

            out = []
            for k in [None, *range(len(x.shape) - 1)]:
                p = Replicate() if k is None else Shard(k)
                out.append((outputs(p), [p, p, *placed(_e, x, params, k), p]))
            return out

        on(getattr(ops, entry.name).default)(op_strategy)
        if entry.fused_add:
            on(getattr(ops, entry.add_name).default)(add_strategy)
        if entry.saves == "stats":
            on(getattr(ops, entry.forward_name).default)(forward_strategy)
        on(getattr(ops, entry.backward_name).default)(backward_strategy)
