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
from typing import ClassVar

__all__ = [
    "CASTING_MODES",
    "FORMULA_FUNCTIONS",
    "OPS",
    "OUT_WRITERS",
    "ROW_IN_PLACE",
    "ROW_MAPS",
    "ROW_OPS",
    "ROW_REDUCTIONS",
    "CastingMode",
    "Op",
    "OutWriter",
    "RowArg",
    "RowMap",
    "RowOp",
    "RowReduction",
    "dim_arg",
    "eps_arg",
    "find",
    "find_casting",
    "find_map",
    "find_row",
    "flag",
    "index",
    "param",
    "size",
    "table",
    "x_arg",
]

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
class CastingMode:
    """How a weighted norm rounds, by the conventions models were trained
    with (Liger-Kernel's names). Each is the entry's op in aten's mode with
    the weight and one product arranged: ``weight_in`` says where
    ``weight + offset`` is computed ("weight": in the weight's dtype, as
    ``weight + offset`` in torch; "compute": in the compute type,
    ``weight.float() + offset``); ``rounds_normalized``: x-hat is rounded to
    x's dtype first and the weight multiplies it after, the result in
    ``torch.result_type(weight, x)``."""

    name: str
    weight_in: str
    rounds_normalized: bool
    doc: str


CASTING_MODES: tuple[CastingMode, ...] = (
    CastingMode(
        name="aten",
        weight_in="weight",
        rounds_normalized=False,
        doc="``F.rms_norm(x, (d,), weight + offset, eps)``: x-hat times the weight in the compute type, "
        "rounded once to x's dtype",
    ),
    CastingMode(
        name="llama",
        weight_in="weight",
        rounds_normalized=True,
        doc="``(weight + offset) * x_hat.to(x.dtype)``, in ``torch.result_type(weight, x)``: Hugging Face's "
        "Llama, Mistral, Qwen2/3 and Phi-3 norms",
    ),
    CastingMode(
        name="gemma",
        weight_in="compute",
        rounds_normalized=False,
        doc="``(x_hat * (offset + weight.float())).to(x.dtype)``: Hugging Face's Gemma 1/2/3 norms "
        "(with ``offset=1``)",
    ),
)


@dataclass(frozen=True)
class RowArg:
    """One argument of a row op, by its role: what its rules are (shape,
    dtype, device, overlap, how it is read) is the role's, the same for every
    entry. Roles:

    * ``x``: the rows (every dim but the last is a row; the op works along
      the last), first in every schema;
    * ``param``: an optional per-column tensor of length x.size(-1)
      (``Tensor? weight=None``): any float dtype, on x's device, read as it
      was at the call; ``weight`` multiplies and ``bias`` adds (the entry is
      affine in them: the vmap rule and their gradients use it);
    * ``table``: a per-row tensor ``[..., r]`` broadcast against x's leading
      dims (never enlarging x), its last dim the op's width r (cos, sin);
    * ``eps``: the float added under a root; ``default`` None is torch's
      (the compute type's machine epsilon; the schema's ``float? eps=None``);
    * ``flag``: a bool and its default;
    * ``dim``: the dim the op runs along (``int dim=-1``, wrapped as torch
      wraps a dim: in [-x.dim(), x.dim())); the op is the last-dim op on
      ``x.movedim(dim, -1)``, its result moved back (contiguous). Its
      building blocks (``_<name>_forward``/``_backward``) run along the last
      dim and take no dim;
    * ``index``: an integer tensor of row numbers into a table (vLLM's
      ``positions``): a table ``gathered_by`` it has one row per position
      (``[rows, r]``), and token t of x reads the row ``index[t]``; every
      index is checked to lie in the table before anything is written;
    * ``size``: an int the kernel needs (a head's size: x's rows are split
      into heads of it).

    An in-place entry (``saves == "none"``) names its x arguments
    explicitly, in schema order: one written in place has its alias letter
    in ``written`` (``Tensor(a!) query``), an ``optional`` one may be None.
    """

    name: str
    role: str
    default: float | bool | None = None
    written: str = ""
    optional: bool = False
    gathered_by: str = ""

    ROLES: ClassVar[tuple[str, ...]] = ("x", "param", "table", "eps", "flag", "dim", "index", "size")

    @property
    def schema(self) -> str:
        """The argument in torch's schema language, with its default."""
        if self.role == "x":
            alias = f"({self.written}!)" if self.written else ""
            return f"Tensor{alias}{'?' if self.optional else ''} {self.name}"
        if self.role in ("index", "table"):
            return f"Tensor {self.name}"
        if self.role == "size":
            return f"int {self.name}"
        if self.role == "param":
            return f"Tensor? {self.name}=None"
        if self.role == "table":
            return f"Tensor {self.name}"
        if self.role == "eps":
            return "float? eps=None" if self.default is None else f"float eps={self.default!r}"
        if self.role == "dim":
            return f"int {self.name}={self.default}"
        return f"bool {self.name}" if self.default is None else f"bool {self.name}={self.default}"


def x_arg(name: str = "x", *, written: str = "", optional: bool = False) -> RowArg:
    return RowArg(name, "x", written=written, optional=optional)


def index(name: str) -> RowArg:
    return RowArg(name, "index")


def size(name: str) -> RowArg:
    return RowArg(name, "size")


def param(name: str) -> RowArg:
    return RowArg(name, "param")


def table(name: str, gathered_by: str = "") -> RowArg:
    return RowArg(name, "table", gathered_by=gathered_by)


def eps_arg(default: float | None = None) -> RowArg:
    return RowArg("eps", "eps", default)


def flag(name: str, default: bool | None) -> RowArg:
    """A bool and its default (None: the schema gives it none, as vLLM's is_neox)."""
    return RowArg(name, "flag", default)


def dim_arg() -> RowArg:
    return RowArg("dim", "dim", -1)


@dataclass(frozen=True)
class RowOp:
    """An op over rows: every output row is computed from the same row of x
    (its last dim) and the same rows of its other arguments. One entry
    declares its arguments by role (``RowArg``: x, per-column parameters,
    per-row tables, eps, flags), what backward saves, and its formulas; each
    tier's generic row code is instantiated per entry (core's row kinds and
    maps; the torch tiers' kernels, autograd, fakes, vmap and sharding rules;
    the bridge's binding; the typed faces and modules). What an entry
    declares:

    * ``functor``: the arithmetic in core (``tierkit::kernels::<functor>``:
      a row kind in ``row_functors.h`` with forward, fused-residual forward
      and backward rows, or a map in ``map_functors.h`` with forward and
      transposed rows) and in torch-cuda (``<functor>RowsF`` in
      ``row_functors.cuh``, ``<functor>MapF``);
    * ``args``: the schema's arguments after x, by role, in schema order;
    * ``saves``: what backward reads beside grad:
      - ``stats``: the per-row values the forward saves, in the compute type
        (the last dim of ``_<name>_forward``'s second output); backward
        reads x, the parameters and the stats and returns x's and each
        parameter's gradient. The kind's mixed-dtype rule is aten's norms':
        parameters of any float dtype, computed in float (double where x or
        a parameter is double), output in x's dtype, each gradient in its
        input's;
      - ``none``: no backward: the op writes its x arguments in place and
        returns nothing (vLLM's serving ops; not differentiable), its x
        arguments named in ``args`` (schema order as declared);
      - ``linear``: nothing: the op is linear in x, its x-gradient the
        transposed map (``_<name>_backward`` reads the tables and flags);
        output in torch's promotion of x and the tables, x's gradient in
        x's dtype, each table's in its own;
    * ``terms``, ``reference``, ``derivatives``: the value in the compute
      type and each input's gradient from ``grad`` (the output's), in the
      formula vocabulary plus ``row_mean`` (the mean over the last dim,
      kept), ``row_total`` (the sum over the last dim, kept), ``row_max``
      (the largest element of the last dim, kept), ``row_sum`` (the sum
      over every leading dim: a parameter's shape), ``rsqrt``, ``exp``,
      ``log``, and for tables ``rotate`` (the pair rotation by the
      flag ``interleaved``: [-x2, x1] per pair), ``rotate_t`` (its
      transpose), ``sum_to`` (a gradient summed to a table's broadcast
      shape) and ``mapped`` (the first r columns), over x, the other
      arguments (an absent weight is 1, an absent bias 0) and the named
      ``terms`` (evaluated in order). The tests compare with the reference;
      both torch tiers use the derivatives where a graph is wanted of the
      backward (double backward, hessians) and the reference's tangent in
      forward mode: the backward and tangent written once, one home;
    * ``normalized``: x-hat from x and the stats (``saves == "stats"``: the
      parameters' gradients are ``sum over rows of grad * x-hat`` for the
      weight, of grad for the bias);
    * ``width_rule``: what a table's width r must be, as text for the
      checks' messages (``even`` is checked);
    * ``fused_add``: also ``add_<name>`` (returns ``(y, h)``, h = x +
      residual rounded) and ``add_<name>_`` (writes h into residual);
    * ``casting``: the public overloads also come as ``.casting`` overloads
      with keyword arguments ``offset`` (added to the weight) and
      ``casting_mode`` (one of ``CASTING_MODES``), each a composite of the
      plain overload and torch's ops (one home: torch-common's ``casting``);
    * ``module``: the torch.nn-style module tierkit_torch makes for it.

    DTensor and vmap facts are the roles': rows are independent (leading
    dims shard freely, the last is made whole), the parameters' gradients
    are Partial sums, a batched parameter applies after the unweighted op,
    tables broadcast like x's leading dims.
    """

    name: str
    functor: str
    doc: str
    args: tuple[RowArg, ...]
    reference: str
    derivatives: dict[str, str]
    saves: str = "stats"
    stats: tuple[str, ...] = ()
    terms: dict[str, str] = field(default_factory=dict)
    normalized: str = ""
    width_rule: str = ""
    fused_add: bool = False
    casting: bool = False
    module: str = ""

    CASTING_ARGS: ClassVar[str] = 'float offset=0.0, str casting_mode="aten"'

    def __post_init__(self) -> None:
        in_place = self.saves == "none"
        for a in self.args:
            if a.role not in RowArg.ROLES or (a.role == "x" and not in_place):
                raise ValueError(f"{self.name}: argument {a.name!r}: expected a role of {RowArg.ROLES[1:]}")
        if self.saves not in ("stats", "linear", "none"):
            raise ValueError(f"{self.name}: saves: expected 'stats', 'linear' or 'none', got {self.saves!r}")
        if in_place and not any(a.role == "x" and a.written for a in self.args):
            raise ValueError(f"{self.name}: saves 'none': expected an x argument written in place")
        for a in self.args:
            if a.gathered_by and a.gathered_by not in self._named("index"):
                raise ValueError(
                    f"{self.name}: {a.name}: gathered by {a.gathered_by!r}, which is no index argument"
                )
        if (self.saves == "stats") != bool(self.stats):
            raise ValueError(f"{self.name}: stats: declared exactly when saves == 'stats'")
        if self.saves == "stats" and self.has_eps == self.has_dim:
            # Every tier's adapter and every caller passes it last (row_entry.h's Scalar, trailing()).
            raise ValueError(
                f"{self.name}: a row reduction takes one trailing scalar, an eps or a dim, "
                f"got {'both' if self.has_eps else 'neither'}"
            )

    def _named(self, role: str) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.role == role)

    @property
    def kind(self) -> str:
        """The tiers' code path: "row_reduction" (saves stats), "row_map" (linear) or "row_in_place"."""
        return {"stats": "row_reduction", "linear": "row_map", "none": "row_in_place"}[self.saves]

    @property
    def params(self) -> tuple[str, ...]:
        return self._named("param")

    @property
    def tables(self) -> tuple[str, ...]:
        return self._named("table")

    @property
    def flags(self) -> tuple[tuple[str, bool], ...]:
        return tuple((a.name, bool(a.default)) for a in self.args if a.role == "flag")

    @property
    def eps(self) -> float | None:
        """eps's default (None: torch's)."""
        return next((a.default for a in self.args if a.role == "eps"), None)

    @property
    def eps_arg(self) -> str:
        return next(a.schema for a in self.args if a.role == "eps")

    @property
    def has_eps(self) -> bool:
        return any(a.role == "eps" for a in self.args)

    @property
    def has_dim(self) -> bool:
        """Runs along a ``dim`` argument (else always along the last dim)."""
        return any(a.role == "dim" for a in self.args)

    def trailing(self, eps: float | None) -> float | int | None:
        """A row reduction's last argument in a positional call: -1 for its
        dim (along the last), or `eps` for its eps."""
        return -1 if self.has_dim else eps

    @property
    def arg_list(self) -> str:
        if self.saves == "none":  # its x arguments are among its args, in place
            return ", ".join(a.schema for a in self.args)
        return ", ".join([x_arg().schema, *(a.schema for a in self.args)])

    @property
    def schema(self) -> str:
        return f"{self.name}({self.arg_list}) -> {'()' if self.saves == 'none' else 'Tensor'}"

    @property
    def forward_name(self) -> str:
        return f"_{self.name}_forward"

    @property
    def backward_name(self) -> str:
        return f"_{self.name}_backward"

    @property
    def add_name(self) -> str:
        return f"add_{self.name}"

    @property
    def node_name(self) -> str:
        return "".join(p.title() for p in self.name.split("_")) + "Backward0"

    def _rest(self) -> str:
        return ", ".join(a.schema for a in self.args)

    @property
    def schemas(self) -> tuple[str, ...]:
        """Every overload of the entry: the op, its fused and casting forms,
        and the building blocks its autograd uses."""
        out = [self.schema]
        if self.fused_add:
            out.append(f"{self.add_name}(Tensor x, Tensor residual, {self._rest()}) -> (Tensor, Tensor)")
            out.append(f"{self.add_name}_(Tensor x, Tensor(a!) residual, {self._rest()}) -> Tensor")
        if self.casting:
            kw = f"*, {self.CASTING_ARGS}"
            out.append(f"{self.name}.casting({self.arg_list}, {kw}) -> Tensor")
            if self.fused_add:
                out.append(
                    f"{self.add_name}.casting(Tensor x, Tensor residual, {self._rest()}, {kw}) -> (Tensor, Tensor)"
                )
                out.append(
                    f"{self.add_name}_.casting(Tensor x, Tensor(a!) residual, {self._rest()}, {kw}) -> Tensor"
                )
        if self.saves == "none":  # no building blocks: nothing to differentiate
            return tuple(out)
        if self.saves == "stats":
            params = [f"Tensor? {p}" for p in self.params]
            eps = ["float eps"] if self.has_eps else []
            grads = ", ".join(["Tensor"] * (1 + len(self.params)))
            forward = ", ".join(["Tensor x", *params, *eps])
            backward = ", ".join(["Tensor grad", "Tensor x", *params, "Tensor stats"])
            out.append(f"{self.forward_name}({forward}) -> (Tensor, Tensor)")
            out.append(f"{self.backward_name}({backward}) -> ({grads})")
        else:
            tables = ", ".join(f"Tensor {t}" for t in self.tables)
            flags = ", ".join(f"bool {f}" for f, _ in self.flags)
            out.append(f"{self.backward_name}(Tensor grad, {tables}, {flags}) -> Tensor")
        return tuple(out)

    @property
    def public(self) -> tuple[str, ...]:
        """The names of its public overloads (the building blocks are internal)."""
        return (self.name, self.add_name, self.add_name + "_") if self.fused_add else (self.name,)

    @property
    def overloads(self) -> tuple[str, ...]:
        """Every overload's name, the building blocks included."""
        blocks = {
            "stats": (self.forward_name, self.backward_name),
            "linear": (self.backward_name,),
            "none": (),
        }[self.saves]
        return (*self.public, *blocks)


# The tiers' names for the entries of each code path (one class: RowOp).
RowReduction = RowOp
RowMap = RowOp


ROW_OPS: tuple[RowOp, ...] = (
    RowOp(
        name="rms_norm",
        functor="RmsNorm",
        doc="F.rms_norm(x, (x.size(-1),), weight, eps): x / sqrt(mean(x^2, -1) + eps) * weight",
        args=(param("weight"), eps_arg()),
        stats=("rstd",),
        terms={"rstd": "rsqrt(row_mean(x * x) + eps)", "xhat": "x * rstd", "g": "grad * weight"},
        reference="xhat * weight",
        derivatives={
            "x": "rstd * (g - xhat * row_mean(g * xhat))",
            "weight": "row_sum(grad * xhat)",
        },
        normalized="x * rstd",
        fused_add=True,
        module="RMSNorm",
        casting=True,
    ),
    RowOp(
        name="layer_norm",
        functor="LayerNorm",
        doc="F.layer_norm(x, (x.size(-1),), weight, bias, eps): (x - mean) / sqrt(var + eps) * weight + bias",
        args=(param("weight"), param("bias"), eps_arg(1e-05)),
        stats=("mean", "rstd"),
        terms={
            "xc": "x - row_mean(x)",
            "rstd": "rsqrt(row_mean(xc * xc) + eps)",
            "xhat": "xc * rstd",
            "g": "grad * weight",
        },
        reference="xhat * weight + bias",
        derivatives={
            "x": "rstd * (g - row_mean(g) - xhat * row_mean(g * xhat))",
            "weight": "row_sum(grad * xhat)",
            "bias": "row_sum(grad)",
        },
        normalized="(x - mean) * rstd",
        module="LayerNorm",
    ),
    RowOp(
        name="softmax",
        functor="Softmax",
        doc="torch.softmax(x, dim): exp(x - max) / sum(exp(x - max)) along dim",
        args=(dim_arg(),),
        stats=("max", "sum"),
        terms={"e": "exp(x - row_max(x))", "y": "e / row_total(e)"},
        reference="y",
        derivatives={"x": "y * (grad - row_total(grad * y))"},
    ),
    RowOp(
        name="log_softmax",
        functor="LogSoftmax",
        doc="torch.log_softmax(x, dim): (x - max) - log(sum(exp(x - max))) along dim",
        args=(dim_arg(),),
        stats=("max", "log_sum"),
        terms={"z": "x - row_max(x)", "y": "z - log(row_total(exp(z)))"},
        reference="y",
        derivatives={"x": "grad - exp(y) * row_total(grad)"},
    ),
    RowOp(
        name="rotary_embedding",
        functor="Rotary",
        doc="rotary position embedding over the last dim: x_r * cos + rotate(x_r) * sin on the first "
        "r = cos.size(-1) columns (rotate: NeoX's rotate_half, or GPT-J's pairs when interleaved), the rest "
        "passed through",
        args=(table("cos"), table("sin"), flag("interleaved", False)),
        saves="linear",
        reference="mapped(x) * cos + rotate(mapped(x)) * sin",
        derivatives={
            "x": "mapped(grad) * cos + rotate_t(mapped(grad) * sin)",
            "cos": "sum_to(mapped(grad) * mapped(x), cos)",
            "sin": "sum_to(mapped(grad) * rotate(mapped(x)), sin)",
        },
        width_rule="even, at most x.size(-1)",
    ),
    RowOp(
        name="rotary_embedding_cached",
        functor="RotaryCached",
        doc="vLLM's rotary_embedding: query and key (heads of head_size per token) rotated in place, token t's "
        "cos and sin the halves of cos_sin_cache[positions[t]] (NeoX's pairs when is_neox, else GPT-J's), "
        "a head's columns from cos_sin_cache.size(-1) on passed through",
        args=(
            index("positions"),
            x_arg("query", written="a"),
            x_arg("key", written="b", optional=True),
            table("cos_sin_cache", gathered_by="positions"),
            size("head_size"),
            flag("is_neox", None),
        ),
        saves="none",
        # Per head, with cos and sin the gathered row's halves widened to the
        # rotated width (repeated for NeoX, interleaved for GPT-J): the row
        # map's formula.
        reference="mapped(x) * cos + rotate(mapped(x)) * sin",
        derivatives={},
        width_rule="even, at most head_size",
    ),
)

# Each code path's entries, in table order.
ROW_REDUCTIONS: tuple[RowOp, ...] = tuple(e for e in ROW_OPS if e.kind == "row_reduction")
ROW_MAPS: tuple[RowOp, ...] = tuple(e for e in ROW_OPS if e.kind == "row_map")
ROW_IN_PLACE: tuple[RowOp, ...] = tuple(e for e in ROW_OPS if e.kind == "row_in_place")


def find_map(name: str) -> RowMap:
    for entry in ROW_MAPS:
        if entry.name == name:
            return entry
    raise KeyError(f"tierkit op table: no row map named {name!r}")


def find_casting(name: str) -> CastingMode:
    for mode in CASTING_MODES:
        if mode.name == name:
            return mode
    raise KeyError(f"tierkit op table: no casting mode named {name!r}")


def find_row(name: str) -> RowReduction:
    """The row reduction whose public overloads include `name`."""
    for entry in ROW_REDUCTIONS:
        if name in entry.public:
            return entry
    raise KeyError(f"tierkit op table: no row reduction named {name!r}")


def find(name: str) -> Op:
    for op in OPS:
        if op.name == name:
            return op
    raise KeyError(f"tierkit op table: no operator named {name!r}")
