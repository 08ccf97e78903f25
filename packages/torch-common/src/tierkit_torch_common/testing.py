"""The op table as every torch test suite reads it: what an entry must
compute, within what tolerance, and how to call it in a namespace.

One home for the reference the suites of torch-cpu, torch-stable, torch-cuda
and the cross-tier tests compare against, so that a new entry of
``tierkit_core.op_table.OPS`` is tested by each of them without new test code
(the guard test ``tests/test_every_suite_reads_the_table.py`` checks it).

Unlike the rest of this package, it imports torch: it is for test suites,
which have torch by definition; ``import tierkit_torch_common`` does not load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tierkit_core.op_table import OPS, ROW_MAPS, ROW_REDUCTIONS, find
from tierkit_core.op_testing import TEST_SCALARS, evaluate, scalar_values

__all__ = [
    "ALPHA",
    "ARITY",
    "BETA",
    "NAMES",
    "SCALARS",
    "C",
    "call",
    "compiled_faces_frames",
    "composite",
    "expected",
    "random_inputs",
    "scalars",
    "tolerance",
    "wide",
]

SCALARS = TEST_SCALARS
ALPHA, BETA, C = SCALARS["alpha"], SCALARS["beta"], SCALARS["c"]
NAMES = tuple(op.name for op in OPS)
ARITY = {op.name: len(op.tensors) for op in OPS}
# The formula vocabulary (tierkit_core.op_table.FORMULA_FUNCTIONS) in torch.
_SCOPE: dict[str, Any] = {"silu": F.silu, "sigmoid": torch.sigmoid}


def scalars(op: str) -> list[float]:
    """The entry's float arguments, in schema order, with the test values."""
    return scalar_values(op)


def composite(op: str, *tensors: torch.Tensor, scalars: Sequence[float] | None = None) -> torch.Tensor:
    """The entry's `reference` in plain (differentiable) torch ops, in the
    inputs' own dtypes: aten's result dtype, shape and layout for the same call."""
    return evaluate(op, tensors, _SCOPE, scalars)


def expected(op: str, *inputs: torch.Tensor, scalars: Sequence[float] | None = None) -> torch.Tensor:
    """Computed the way the kernels do: 16-bit types in float32, rounded once."""
    dtype = inputs[0].dtype
    x = [t if dtype == torch.float64 else t.float() for t in inputs]
    return composite(op, *x, scalars=scalars).to(dtype)


def wide(op: str, *inputs: torch.Tensor) -> torch.Tensor:
    """aten's result (dtype, shape, strides) holding the float64 value rounded
    once through the compute type, for inputs of mixed dtypes and shapes."""
    # The kernels promote first (aten's rule, integers to the default float
    # type), then compute; a formula of aten functions (silu) would refuse
    # integer inputs, so it sees them promoted.
    if len(inputs) > 2:  # torch.result_type takes two; a wrong dtype here would pass silently
        raise NotImplementedError(f"wide: {op} takes {len(inputs)} tensors; promote them as aten does first")
    dtype = torch.result_type(*inputs) if len(inputs) == 2 else inputs[0].dtype
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    like = composite(op, *(t.to(dtype) for t in inputs))
    exact = composite(op, *(t.double() for t in inputs))
    compute = torch.float32 if like.dtype in (torch.float16, torch.bfloat16) else like.dtype
    return torch.empty_like(like).copy_(exact.to(compute))


def tolerance(op: str, dtype: torch.dtype) -> dict[str, float]:
    """assert_close's tolerance against `expected`: exact unless the entry allows ulps."""
    ulps = find(op).ulps
    info = torch.finfo(dtype)
    return {"rtol": ulps * info.eps, "atol": ulps * info.tiny}


def call(
    namespace: str, op: str, *inputs: torch.Tensor, scalars: Sequence[float] | None = None, **kwargs: Any
) -> torch.Tensor:
    """``torch.ops.<namespace>.<op>`` with `scalars` (the entry's test values
    by default); with ``out=`` given, its ``.out`` overload."""
    packet = getattr(getattr(torch.ops, namespace), op)
    overload = packet.out if "out" in kwargs else packet
    return overload(*inputs, *(scalar_values(op) if scalars is None else scalars), **kwargs)


def random_inputs(
    op: str,
    *shape: int,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    requires_grad: bool = False,
    device: str = "cpu",
) -> list[torch.Tensor]:
    """One standard-normal tensor per tensor input of the entry."""
    return [
        torch.randn(*shape, generator=generator, dtype=torch.float64)
        .to(device=device, dtype=dtype)
        .requires_grad_(requires_grad)
        for _ in range(ARITY[op])
    ]


class _LoadedLater:
    """torch.ops.<ns> as the JIT build's faces see it: no op at the faces'
    creation (they bind on first call), every op afterwards."""

    def __init__(self, namespace: str) -> None:
        self._ops = getattr(torch.ops, namespace)
        self.loaded = False

    def __getattr__(self, name: str) -> Any:
        if not self.loaded:
            raise AttributeError(name)
        return getattr(self._ops, name)


def compiled_faces_frames(namespace: str, late: bool) -> list[int]:
    """Fresh typed faces (pointwise, row reductions with and without casting
    modes, row maps) over ``torch.ops.<namespace>`` -- bound when made, or,
    with `late`, made before the ops exist -- called from one compiled
    function three times: the compiled frames after each call (one graph: a
    face must not change under dynamo's guards), each result checked
    against the faces' eager result."""
    from torch._dynamo.testing import CompileCounter

    from .fake import typed_faces
    from .row_ops import row_op_faces

    ops = _LoadedLater(namespace) if late else getattr(torch.ops, namespace)
    faces = {**typed_faces(torch, ops, "t"), **row_op_faces(ops, "t")}
    if late:
        ops.loaded = True
    gen = torch.Generator().manual_seed(3)
    x, y, w = (torch.randn(2, 4, 8, generator=gen) for _ in range(3))
    cos, sin = torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen)

    def run(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
        out = [faces[e.name](*([x, y, w][: ARITY[e.name]]), *scalar_values(e.name)) for e in OPS]
        for e in ROW_REDUCTIONS:
            params = [w[0, 0]] * len(e.params)
            out.append(faces[e.name](x, *params, **({"dim": 1} if e.has_dim else {"eps": 1e-6})))
            if e.casting:
                out.append(faces[e.name](x, *params, eps=1e-6, offset=1.0, casting_mode="gemma"))
        out += [faces[e.name](x, cos, sin) for e in ROW_MAPS]
        return out

    want = run(x, y, w)
    counter = CompileCounter()
    compiled = torch.compile(run, backend=counter, fullgraph=True)
    frames = []
    for _ in range(3):
        for got, ref in zip(compiled(x, y, w), want):
            torch.testing.assert_close(got, ref, rtol=0, atol=0)
        frames.append(counter.frame_count)
    return frames
