"""Fake (meta) kernels for the tierkit operator schemas, for any namespace
that defines them: ``tierkit`` (torch-cpu) and ``tierkit_stable`` (torch-stable).

A fake kernel says what a call returns (shape, dtype, device, strides)
without computing it, which is all ``torch.compile``, ``torch.export`` and
meta tensors need. They apply the same checks as the C++ kernels, with
``torch._check`` so symbolic (dynamic) shapes become guards, and a bad call
fails the same way while tracing.

Also the op table's typed faces and the out= rules. Shared by both torch
tiers (see the package's docstring); torch is imported by the caller, this
module only receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from ._words import dtype_name, one_of


def register_fake_kernels(torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any = None) -> None:
    """Register a fake kernel for every functional op of the op table (tierkit_core.op_table) in `ns`.

    `accepted_dtypes` are torch dtype names ("float32", ...), from core's dtype
    table through the C++ library. The .out overloads and add_out need none:
    they decompose into the functional op plus a copy (their
    CompositeImplicitAutograd kernels, see `apply_out_rules`). `lib`, when
    given, is the torch.library.Library the registrations belong to.

    The rules are aten's, as the C++ kernels apply them (torch-cpu's
    checks.h): the result dtype by type promotion, the shape by broadcasting,
    the layout of aten's elementwise result, with the same error messages.
    """
    accepted = tuple(getattr(torch, n) for n in accepted_dtypes)
    accepted_text = one_of(list(accepted_dtypes))

    def fake_pointwise(op: str, names: Sequence[str], float_scalar: bool) -> Callable[..., Any]:
        def fake(*args: Any) -> Any:
            tensors = args[: len(names)]
            for t, name in zip(tensors[1:], names[1:]):
                if t.device != tensors[0].device:
                    raise RuntimeError(
                        f"{op}: {name}: expected device {tensors[0].device} (same as {names[0]}), got {t.device}"
                    )
            dtype = torch.result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
            if float_scalar and not (dtype.is_floating_point or dtype.is_complex):
                dtype = torch.get_default_dtype()  # a Python float promotes integer tensors
            if dtype not in accepted:
                bad = next((i for i, t in enumerate(tensors) if t.dtype not in accepted), len(tensors) - 1)
                got = (
                    dtype_name(tensors[bad].dtype)
                    if tensors[bad].dtype not in accepted
                    else dtype_name(dtype)
                )
                raise RuntimeError(f"{op}: {names[bad]}: expected dtype {accepted_text}, got {got}")
            shape = list(tensors[0].shape)
            for i in range(1, len(tensors)):
                try:
                    shape = list(torch.broadcast_shapes(shape, tensors[i].shape))
                except RuntimeError:
                    others = " and the others" if i > 1 else ""
                    raise RuntimeError(
                        f"{op}: {names[i]}: expected a shape that broadcasts with {shape} ({names[0]}{others}), "
                        f"got {list(tensors[i].shape)}"
                    ) from None
            # aten's own elementwise op on the same inputs lays its result out
            # as TensorIterator does (the C++ kernels use TensorIterator too).
            proto = torch.mul(*tensors) if len(tensors) > 1 else torch.mul(tensors[0], 1.0)
            return torch.empty_like(proto, dtype=dtype)

        return fake

    from tierkit_core.op_table import OPS

    for entry in OPS:
        op = f"{ns}::{entry.name}"
        torch.library.register_fake(op, fake_pointwise(op, entry.tensors, bool(entry.scalars)), lib=lib)


def apply_out_rules(torch: Any, op: str, out: Any, result: Any, resize: bool = True) -> None:
    """The out= rules (aten's, stricter on shape; the C++ kernels' words):
    `out` on the result's device, of a dtype the result can be cast to; an
    empty `out` is resized to the result's shape (unless `resize` is False), a
    non-empty one of another shape is refused (aten would warn and resize)."""
    torch._check(
        out.device == result.device,
        lambda: f"{op}: out: expected device {result.device} (the inputs'), got {out.device}",
    )
    torch._check(
        torch.can_cast(result.dtype, out.dtype),
        lambda: (
            f"{op}: out: expected a dtype the result ({dtype_name(result.dtype)}) can be cast to, got {dtype_name(out.dtype)}"
        ),
    )
    if out.shape != result.shape:
        torch._check(
            resize and out.numel() == 0,
            lambda: f"{op}: out: expected shape {list(result.shape)} (the result's), got {list(out.shape)}",
        )
        out.resize_(result.shape)


def scalar_argument(torch: Any, op: str, name: str, value: Any) -> float:
    """A `float` argument of the typed faces: a number, or a tensor holding
    one. A tensor that requires grad is refused rather than read with
    float(), which would silently cut it out of the graph."""
    if type(value) is float:  # the common case, first: this is on every call
        return value
    if isinstance(value, torch.Tensor) and value.requires_grad and torch.is_grad_enabled():
        raise TypeError(
            f"{op}: {name}: expected a number, got a tensor that requires grad; {name} is a float argument, "
            f"so no gradient can reach it: pass {name}.detach() to use its value, or compute the expression "
            "with torch ops to differentiate it"
        )
    return float(value)


# Eager calls go to the overloads' C entry (OpOverload._op, which
# OpOverload.__call__ wraps in a Python frame of its own: 0.4 of the face's
# 2.1 us a call on one element, against torch.add's 1.4; measured on an
# Intel Xeon). It is what the overload's call runs, so __torch_function__
# (subclasses, modes), dispatch modes, autograd and vmap behave the same.
# Under torch.compile the face calls the OpOverload itself: dynamo puts that
# in the graph, where it would break on a builtin it does not know.
_FACE = """\
def {name}({params}{star}out=None):
    {converts}if compiling():
        return functional({args}) if out is None else out_overload({args}, out=out)
    if out is None:
        return functional_entry({args})
    return out_entry({args}, out=out)
"""

_RULES = """

aten's rules, as ``torch.add``'s: tensors broadcast, their dtypes promote
(``torch.result_type``; the result must be float32, float64, float16 or
bfloat16), any strides; one device. Returns a new tensor laid out like aten's
result. 16-bit inputs are computed in float32 and rounded once. Float
arguments are numbers (a 0-d tensor is read by value; one that requires grad
is refused: no gradient reaches a float argument). Differentiable in reverse
and forward mode in {differentiable} (a broadcast input's gradient is summed
to its shape).

With ``out=``: written there and returned, in aten's convention: an empty
``out`` is resized, a non-empty one of another shape is an error, another
dtype the result can be cast to is written cast; not differentiable.
"""


def typed_faces(torch: Any, ops: Any, prefix: str) -> dict[str, Callable[..., Any]]:
    """The typed Python face of every op of the op table over `ops`
    (``torch.ops.tierkit`` or ``torch.ops.tierkit_stable``): one function per
    op, ``name(tensors..., floats..., *, out=None)``, plus the writers
    (``add_out(a, b, out)``). Each is compiled from a short template (_FACE), so a
    call costs one Python frame over the overload's C entry."""
    from tierkit_core.op_table import OPS, OUT_WRITERS

    faces: dict[str, Callable[..., Any]] = {}
    for entry in OPS:
        converts = "".join(
            f"{s} = scalar_argument(torch, {prefix + '.' + entry.name!r}, {s!r}, {s})\n    "
            for s in entry.scalars
        )
        names = (*entry.tensors, *entry.scalars)
        source = _FACE.format(
            name=entry.name, params=", ".join(names), star=", *, ", converts=converts, args=", ".join(names)
        )
        scope: dict[str, Any] = {
            "scalar_argument": scalar_argument,
            "torch": torch,
            "compiling": torch.compiler.is_dynamo_compiling,
        }
        # Bound on first call: the JIT build loads the library after import.
        for key, overload, entry_point in (
            ("functional", "default", False),
            ("out_overload", "out", False),
            ("functional_entry", "default", True),
            ("out_entry", "out", True),
        ):
            scope[key] = _bound_on_first_call(scope, key, ops, entry.name, overload, entry_point)
        exec(compile(source, f"<tierkit op table: {entry.name}>", "exec"), scope)
        face = scope[entry.name]
        differentiable = ", ".join(f"``{t}``" for t in entry.tensors if t in entry.derivatives) or "no input"
        face.__doc__ = f"``{entry.schema}``: {entry.doc}." + _RULES.format(differentiable=differentiable)
        face.__module__ = prefix + ".ops"
        faces[entry.name] = face
    for writer in OUT_WRITERS:

        def write(*args: Any, _name: str = writer.name) -> Any:
            return getattr(ops, _name).default(*args)

        write.__name__ = write.__qualname__ = writer.name
        write.__doc__ = (
            f"``{writer.schema}``: {writer.doc}; may be an input exactly (in place), not differentiable."
        )
        write.__module__ = prefix + ".ops"
        faces[writer.name] = write
    return faces


def _bound_on_first_call(
    scope: dict[str, Any], key: str, ops: Any, name: str, overload: str, entry_point: bool = False
) -> Callable[..., Any]:
    """`ops.<name>.<overload>` (with `entry_point`: its C entry, ``_op``,
    where the overload has one): bound now where the library is loaded,
    else looked up on the first eager call and then stored in the face's
    globals (the JIT build loads the library after import). Never rebound
    while dynamo traces: it guards on the global it read, and a value
    swapped under it made every compiled model recompile on its second
    call (a guard on the placeholder's ``__code__``)."""

    def bind() -> Any:
        bound = getattr(getattr(ops, name), overload)
        return getattr(bound, "_op", bound) if entry_point else bound

    try:
        return bind()
    except (AttributeError, RuntimeError):
        pass

    def first_call(*args: Any, **kwargs: Any) -> Any:
        import torch

        if torch.compiler.is_dynamo_compiling():
            return getattr(getattr(ops, name), overload)(*args, **kwargs)
        scope[key] = bind()
        return scope[key](*args, **kwargs)

    return first_call
