"""The tierkit operators, one entry each: the description every tier derives from.

Like ATen's ``native_functions.yaml`` and ``derivatives.yaml`` in one: an
entry declares an operator's schema, kind, arithmetic (the name of its core
functor), derivatives, DTensor facts, autocast policy and documentation.
What is *written* per operator is only the arithmetic: one functor in core
(``tierkit/functors.h``, CPU) and one in torch-cuda (``csrc/functors.cuh``),
apart from the loops that run them (``tierkit/kernels.h``, ``csrc/kernels.cu``).
Everything else is derived (see docs/adding-an-op.md):

* C++: ``python -m tierkit_core.op_codegen`` writes ``tierkit/op_table.h``
  (schemas, an X-macro list, the derivative formulas as generic templates);
  the tiers' generic code instantiates one kernel, autograd node, composite
  and binding per entry from it;
* Python: the torch tiers read this module for fake kernels, vmap rules,
  DTensor strategies, the stable tier's autograd and the typed faces.

Plain data and no torch (core knows no torch): formulas are text, valid both
as C++ over ``at::Tensor`` and as Python over ``torch.Tensor``, in a small
vocabulary (``+ - * /``, numbers, the inputs, ``grad``, ``sigmoid``,
``silu``); each tier binds those names to its own library's functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FORMULA_FUNCTIONS", "OPS", "OUT_WRITERS", "Op", "OutWriter", "find"]

# The functions a formula may call, and what they mean (torch's names).
FORMULA_FUNCTIONS = ("sigmoid", "silu")


@dataclass(frozen=True)
class Op:
    """One operator.

    ``args``: the schema's arguments in torch's schema language; tensors come
    first, then ``float`` scalars. ``functor``: the arithmetic, as
    ``tierkit::kernels::<functor>Op<C>`` (CPU) and ``<functor>F<C>`` (CUDA),
    aggregates of the scalars in schema order. ``derivatives``: per tensor
    input, its gradient in ``grad`` (the output's), the inputs and scalars;
    an input without one is not differentiable. ``tangent``: the forward-mode
    formula; ``auto_element_wise`` (ATen's word) derives it from the
    derivatives: each input's formula with ``grad`` replaced by that input's
    tangent, summed. DTensor: ``additive`` (Partial in every input gives
    Partial: a sum), ``linear_in`` (Partial in one of these with the others
    Replicate gives Partial: linear in each), ``partial_when`` (a condition on
    the scalars for either, e.g. no added constant). ``autocast``: "promote"
    means no autocast kernel: mixed inputs are promoted, as torch.add and
    torch.mul are under autocast. ``reference``: the same value in torch ops,
    for the table-driven tests.
    """

    name: str
    args: str
    functor: str
    doc: str
    reference: str
    derivatives: dict[str, str] = field(default_factory=dict)
    tangent: str = "auto_element_wise"
    kind: str = "pointwise"
    additive: bool = False
    linear_in: tuple[str, ...] = ()
    partial_when: str = ""
    autocast: str = "promote"
    backward_node: str = ""  # the node's name when the default (CamelCase of name) reads wrong
    bridge_name: str = ""  # the numpy bridge's name for it, when not `name`
    # How far the kernel may be from `reference` computed in the compute type
    # and rounded once, in ulps of the dtype: 0 (bit-identical) for ops of
    # + - * only; a transcendental function's own error otherwise.
    ulps: int = 0

    @property
    def tensors(self) -> tuple[str, ...]:
        return tuple(a.split()[1] for a in _split(self.args) if a.split()[0] == "Tensor")

    @property
    def scalars(self) -> tuple[str, ...]:
        return tuple(a.split()[1] for a in _split(self.args) if a.split()[0] == "float")

    @property
    def schema(self) -> str:
        return f"{self.name}({self.args}) -> Tensor"

    @property
    def out_schema(self) -> str:
        return f"{self.name}.out({self.args}, *, Tensor(a!) out) -> Tensor(a!)"

    @property
    def bridge(self) -> str:
        """The function's name in tierkit_bridge."""
        return self.bridge_name or self.name

    @property
    def node_name(self) -> str:
        """The backward node's name, aten-style (SiluMulBackward0)."""
        if self.backward_node:
            return self.backward_node
        return "".join(p.title() for p in self.name.split("_")) + "Backward0"

    @property
    def saved(self) -> tuple[str, ...]:
        """The tensor inputs whose values the derivatives read (saved for backward)."""
        used = {w for f in self.derivatives.values() for w in re.findall(r"[A-Za-z_]\w*", f)}
        return tuple(t for t in self.tensors if t in used)


@dataclass(frozen=True)
class OutWriter:
    """An op that writes into a caller's ``out`` of the result's shape, never
    resized: ``name(args of `of`, Tensor(a!) out) -> Tensor(a!)``."""

    name: str
    of: str
    doc: str

    @property
    def schema(self) -> str:
        return f"{self.name}({find(self.of).args}, Tensor(a!) out) -> Tensor(a!)"


def _split(args: str) -> list[str]:
    return [a.strip() for a in args.split(",") if a.strip()]


OPS: tuple[Op, ...] = (
    Op(
        name="custom_add",
        args="Tensor a, Tensor b",
        functor="Add",
        doc="a + b elementwise",
        reference="a + b",
        derivatives={"a": "grad", "b": "grad"},
        additive=True,
        bridge_name="add",  # the bridge's name for it since its first release
    ),
    Op(
        name="mul",
        args="Tensor a, Tensor b",
        functor="Mul",
        doc="a * b elementwise",
        reference="a * b",
        derivatives={"a": "grad * b", "b": "grad * a"},
        linear_in=("a", "b"),
    ),
    Op(
        name="scale_shift",
        args="Tensor x, float alpha, float beta",
        functor="ScaleShift",
        doc="alpha * x + beta elementwise, one pass",
        reference="alpha * x + beta",
        derivatives={"x": "grad * alpha"},
        linear_in=("x",),
        partial_when="beta == 0",
    ),
    Op(
        name="muladd",
        args="Tensor a, Tensor b, float c",
        functor="MulAdd",
        doc="a * b + c elementwise (c a number), one pass",
        reference="a * b + c",
        derivatives={"a": "grad * b", "b": "grad * a"},
        linear_in=("a", "b"),
        partial_when="c == 0",
        backward_node="MulAddBackward0",
    ),
    Op(
        name="silu_mul",
        args="Tensor a, Tensor b",
        functor="SiluMul",
        doc="silu(a) * b elementwise, the gate of SwiGLU",
        reference="silu(a) * b",
        derivatives={"a": "grad * b * sigmoid(a) * (1 + a * (1 - sigmoid(a)))", "b": "grad * silu(a)"},
        # vmath::vexp_sigmoid (1.011 ulp) against torch's exp, then a division
        # and a product: measured within 3 ulps of eager in float32; 16-bit
        # results round once from those floats, so within 1 ulp.
        ulps=4,
        # silu(a) * b is linear in b alone: a Partial b with a Replicate a
        # stays Partial; a Partial a never can (silu is not linear).
        linear_in=("b",),
    ),
    Op(
        name="gelu_tanh_mul",
        args="Tensor a, Tensor b",
        functor="GeluTanhMul",
        doc='F.gelu(a, approximate="tanh") * b elementwise, the gate of GeGLU (Gemma)',
        # 0.5 a (1 + tanh(u)) with u = sqrt(2/pi) (a + 0.044715 a^3) is
        # a * sigmoid(2u): the same function, written without tanh's
        # cancellation where 1 + tanh(u) nears 0 (a < -3), where eager's
        # float result loses every digit and this one none.
        reference="a * sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a)) * b",
        derivatives={
            "a": "grad * b * (sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a)) + a"
            " * sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a))"
            " * (1 - sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a)))"
            " * 1.5957691216057308 * (1 + 0.134145 * a * a))",
            "b": "grad * a * sigmoid(1.5957691216057308 * (a + 0.044715 * a * a * a))",
        },
        # The functor's exp (vmath::vexp_sigmoid, 1.011 ulp) against torch's
        # sigmoid over the same z (the same roundings: no contraction), one
        # division, one product: silu_mul's budget.
        ulps=4,
        linear_in=("b",),  # linear in b alone, as silu_mul
    ),
)

OUT_WRITERS: tuple[OutWriter, ...] = (
    OutWriter(
        name="add_out", of="custom_add", doc="write a + b into out (the result's shape; never resized)"
    ),
)


@dataclass(frozen=True)
class RowReduction:
    """An op of the second kind: a reduction over the last dimension, with
    saved state (RMSNorm). Its kernels, autograd node, fakes, vmap and
    sharding rules are written for the kind (torch-cpu's csrc/rms_norm.cpp and
    _norms.py, docs/reductions.md), not derived per entry as the pointwise
    ones are; the entries here hold what is declared: schema and docs line.
    ``internal``: a building block of the others' autograd (saved ``rstd``),
    not part of the public face."""

    name: str
    schema: str
    doc: str
    internal: bool = False
    kind: str = "row_reduction"


ROW_REDUCTIONS: tuple[RowReduction, ...] = (
    RowReduction(
        name="rms_norm",
        schema="rms_norm(Tensor x, Tensor? weight=None, float? eps=None) -> Tensor",
        doc="F.rms_norm(x, (x.size(-1),), weight, eps): x / sqrt(mean(x^2, -1) + eps) * weight",
    ),
    RowReduction(
        name="add_rms_norm",
        schema="add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float? eps=None) -> (Tensor, Tensor)",
        doc="(rms_norm(h, weight, eps), h) with h = x + residual rounded to the dtype, in one pass",
    ),
    RowReduction(
        name="add_rms_norm_",
        schema="add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight=None, float? eps=None) -> Tensor",
        doc="residual becomes h = x + residual; returns rms_norm(h, weight, eps) (vLLM's fused_add_rms_norm)",
    ),
    RowReduction(
        name="_rms_norm_forward",
        schema="_rms_norm_forward(Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor)",
        doc="(y, rstd): the forward and the per-row 1/sqrt(mean(x^2) + eps) its backward reads",
        internal=True,
    ),
    RowReduction(
        name="_rms_norm_backward",
        schema="_rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, Tensor rstd) -> (Tensor, Tensor)",
        doc="(grad_x, grad_weight) from the saved rstd; grad_weight reduced across rows in a fixed order",
        internal=True,
    ),
)


def find(name: str) -> Op:
    for op in OPS:
        if op.name == name:
            return op
    raise KeyError(f"tierkit op table: no operator named {name!r}")
