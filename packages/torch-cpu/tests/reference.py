"""The op table's reference (tierkit_torch_common.testing) bound to this
tier's namespace, so a new entry is tested by every suite that parametrizes
over ARITY without new test code."""

from tierkit_torch_common import testing
from tierkit_torch_common.testing import (
    ALPHA,
    ARITY,
    BETA,
    SCALARS,
    C,
    composite,
    expected,
    scalars,
    tolerance,
)

__all__ = ["ALPHA", "ARITY", "BETA", "SCALARS", "C", "call", "composite", "expected", "scalars", "tolerance"]


def call(op, *inputs, **kwargs):
    return testing.call("tierkit", op, *inputs, **kwargs)
