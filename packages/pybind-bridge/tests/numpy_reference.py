"""The op table's entries (tierkit_core.op_table) as numpy computes them: the
same formula and test scalars as torch's suites (tierkit_core.op_testing),
bound to numpy, so a new entry is tested here with no new test code."""

import numpy as np
import tierkit_bridge as tb
from tierkit_core.op_table import OPS, find
from tierkit_core.op_testing import evaluate, numpy_functions, numpy_row_reference, scalar_values

NUMPY = numpy_functions(np)
# The bridge's name for each entry, and how many arrays it takes.
BRIDGE = {op.bridge: op.name for op in OPS}
ARITY = {op.bridge: len(op.tensors) for op in OPS}


def reference(op, dtype, *arrays):
    """numpy's result computed the way the kernel does (16-bit in float32,
    rounded once), in `dtype`."""
    work = np.float32 if dtype == np.float16 else dtype
    return np.asarray(evaluate(BRIDGE[op], [np.asarray(a, dtype=work) for a in arrays], NUMPY)).astype(dtype)


def ulps(op):
    """How far the kernel may be from `reference`, in ulps of the dtype (the entry's)."""
    return find(BRIDGE[op]).ulps


def tolerance(op, dtype):
    """assert_allclose's tolerance: exact unless the entry allows ulps."""
    info = np.finfo(dtype)
    return {"rtol": float(ulps(op) * info.eps), "atol": float(ulps(op) * info.tiny)}


def call(op, *arrays, out=None):
    return getattr(tb, op)(*arrays, *scalar_values(BRIDGE[op]), out=out)


def row_reference(entry, x, params, eps=None):
    """The row reduction's value from its table formula in extended precision
    (numpy's longdouble), parameters None where absent; eps the entry's
    default when None."""
    if eps is None:
        eps = (
            entry.eps
            if entry.eps is not None
            else np.finfo(np.float64 if x.dtype == np.float64 else np.float32).eps
        )
    return numpy_row_reference(np, entry, x, params, eps, np.longdouble)
