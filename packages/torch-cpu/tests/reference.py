"""What each op must compute and how to call it, from the op table: every
entry's `reference` formula in plain torch ops, so a new entry is tested by
every suite that parametrizes over ARITY without new test code."""

import torch
import torch.nn.functional as F
from tierkit_core.op_table import OPS, find

# The float arguments' values in the tests, by name (any other: 0.5).
SCALARS = {"alpha": 1.75, "beta": -0.5, "c": 0.25}
ALPHA, BETA, C = SCALARS["alpha"], SCALARS["beta"], SCALARS["c"]
ARITY = {op.name: len(op.tensors) for op in OPS}
_SCOPE = {"silu": F.silu, "sigmoid": torch.sigmoid}


def scalars(op):
    return [SCALARS.get(s, 0.5) for s in find(op).scalars]


def _reference(op, tensors):
    entry = find(op)
    names = dict(zip(entry.tensors, tensors))
    names.update(zip(entry.scalars, scalars(op)))
    return eval(entry.reference, dict(_SCOPE), names)


def expected(op, *inputs):
    """Computed the way the kernels do: 16-bit types in float32, rounded once."""
    dtype = inputs[0].dtype
    x = [t if dtype == torch.float64 else t.float() for t in inputs]
    return _reference(op, x).to(dtype)


def tolerance(op, dtype):
    """assert_close's tolerance against `expected`: exact unless the op's entry allows ulps."""
    ulps = find(op).ulps
    info = torch.finfo(dtype)
    return {"rtol": ulps * info.eps, "atol": ulps * info.tiny}


def call(op, *inputs):
    return getattr(torch.ops.tierkit, op)(*inputs, *scalars(op))


def composite(op, *inputs):
    """The same maths in differentiable torch ops, for gradient comparisons."""
    return _reference(op, list(inputs))
