"""What the test suites of every tier need from an op table entry, with no
array library: the test values of its scalars and its `reference` formula
evaluated over the caller's arrays and functions.

torch's suites bind it to torch (``tierkit_torch_common.testing``), the
bridge's to numpy: one set of test scalars and one evaluator, so a new entry
is tested everywhere by the same formula.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tierkit_core.op_table import FORMULA_FUNCTIONS, find

__all__ = ["TEST_SCALARS", "evaluate", "numpy_functions", "scalar_values"]

# The float arguments' values in the tests, by name (any other: 0.5).
TEST_SCALARS: Mapping[str, float] = {"alpha": 1.75, "beta": -0.5, "c": 0.25}


def scalar_values(op: str) -> list[float]:
    """The entry's float arguments, in schema order, with the test values."""
    return [TEST_SCALARS.get(s, 0.5) for s in find(op).scalars]


def numpy_functions(np: Any) -> dict[str, Callable[..., Any]]:
    """The formula vocabulary in numpy (the module passed in: core does not
    import it), computed as eager torch computes it, so special values agree:
    silu(x) = x / (1 + exp(-x)), sigmoid(x) = 1 / (1 + exp(-x))."""

    def sigmoid(a: Any) -> Any:
        with np.errstate(over="ignore"):  # exp(-a) of a very negative a: inf, as in torch
            return 1 / (1 + np.exp(-a))

    def silu(a: Any) -> Any:
        with np.errstate(over="ignore", invalid="ignore"):
            return a / (1 + np.exp(-a))

    return {"sigmoid": sigmoid, "silu": silu}


def evaluate(
    op: str,
    arrays: Sequence[Any],
    functions: Mapping[str, Callable[..., Any]],
    scalars: Sequence[float] | None = None,
) -> Any:
    """The entry's `reference` over `arrays` (its tensor inputs, in order) and
    `scalars` (its float arguments; the test values by default), with the
    formula vocabulary bound to `functions`."""
    missing = set(FORMULA_FUNCTIONS) - set(functions)
    if missing:
        raise KeyError(f"evaluate: functions lacks {sorted(missing)} of the formula vocabulary")
    entry = find(op)
    if len(arrays) != len(entry.tensors):
        raise TypeError(f"evaluate: {op} takes {len(entry.tensors)} tensors, got {len(arrays)}")
    names: dict[str, Any] = dict(zip(entry.tensors, arrays))
    values = scalar_values(op) if scalars is None else list(scalars)
    if len(values) != len(entry.scalars):
        raise TypeError(f"evaluate: {op} takes {len(entry.scalars)} scalars, got {len(values)}")
    names.update(zip(entry.scalars, values))
    return eval(entry.reference, {"__builtins__": {}, **functions}, names)
