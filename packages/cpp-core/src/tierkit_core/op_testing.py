"""What the test suites of every tier need from an op table entry, with no
array library: the test values of its scalars and its `reference` formula
evaluated over the caller's arrays and functions; for a row reduction, its
terms, value and gradients (`row_names`, `evaluate_row`).

torch's suites bind it to torch (``tierkit_torch_common.testing``), the
bridge's to numpy: one set of test scalars and one evaluator, so a new entry
is tested everywhere by the same formula.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tierkit_core.op_table import FORMULA_FUNCTIONS, RowReduction, find

__all__ = [
    "ROW_FUNCTIONS",
    "TEST_SCALARS",
    "dtype_pairs",
    "evaluate",
    "evaluate_row",
    "numpy_functions",
    "numpy_row_functions",
    "numpy_row_reference",
    "row_names",
    "scalar_values",
]

# The float arguments' values in the tests, by name (any other: 0.5).
TEST_SCALARS: Mapping[str, float] = {"alpha": 1.75, "beta": -0.5, "c": 0.25}


def scalar_values(op: str) -> list[float]:
    """The entry's float arguments, in schema order, with the test values."""
    return [TEST_SCALARS.get(s, 0.5) for s in find(op).scalars]


def dtype_pairs(spec: str, library: Any) -> list[tuple[Any, Any]]:
    """Pairs of dtypes written as text, ``"float16/float32 float32/float64"``,
    as the library's dtypes (numpy or torch, passed in: core imports
    neither): the mixed-dtype cases each tier's suites walk, one line each
    instead of a hand-written table per suite."""
    pairs = []
    for pair in spec.split():
        a, b = pair.split("/")
        pairs.append((getattr(library, a), getattr(library, b)))
    return pairs


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


# ---- row reductions -------------------------------------------------------------

# What a row reduction's formulas call: the mean, sum and max over the last
# dim (kept as a dim of 1), the sum over every leading dim (a parameter's
# shape), 1/sqrt, exp, log.
ROW_FUNCTIONS = ("row_mean", "row_total", "row_max", "row_sum", "rsqrt", "exp", "log")


def numpy_row_functions(np: Any) -> dict[str, Callable[..., Any]]:
    """The row formulas' vocabulary in numpy (the module passed in)."""
    return {
        "row_mean": lambda t: t.mean(-1, keepdims=True),
        "row_total": lambda t: t.sum(-1, keepdims=True),
        "row_max": lambda t: t.max(-1, keepdims=True, initial=-np.inf),  # an empty row: -inf
        "row_sum": lambda t: t.reshape(-1, t.shape[-1]).sum(0),
        "rsqrt": lambda t: 1 / np.sqrt(t),
        "exp": np.exp,
        "log": np.log,
    }


def row_names(
    entry: RowReduction,
    x: Any,
    params: Sequence[Any],
    eps: Any,
    functions: Mapping[str, Callable[..., Any]],
    grad: Any = None,
) -> dict[str, Any]:
    """The names the entry's formulas read, bound: `functions`, x, its
    parameters (in the caller's compute type; an absent weight 1, an absent
    bias 0), eps, grad (when given) and every term the formulas define."""
    missing = set(ROW_FUNCTIONS) - set(functions)
    if missing:
        raise KeyError(f"row_names: functions lacks {sorted(missing)} of the row formulas' vocabulary")
    names: dict[str, Any] = {**functions, "weight": 1.0, "bias": 0.0}
    names.update({n: p for n, p in zip(entry.params, params) if p is not None})
    names.update(x=x, eps=eps)
    if grad is not None:
        names["grad"] = grad
    for term, formula in entry.terms.items():
        if grad is None and "grad" in formula:
            continue
        names[term] = evaluate_row(entry, formula, names)
    return names


def evaluate_row(entry: RowReduction, formula: str, names: Mapping[str, Any]) -> Any:
    """One of the entry's formulas (`entry.reference`, a derivative, a term) over `names` (`row_names`)."""
    return eval(compile(formula, f"<{entry.name} formula>", "eval"), {"__builtins__": {}}, dict(names))


def numpy_row_reference(
    np: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: float, dtype: Any
) -> Any:
    """The entry's value over numpy arrays (the module passed in), computed
    in `dtype` (numpy.longdouble, numpy.float64): x and its parameters (None
    where absent) converted to it, then the entry's formula (special values
    quietly: an empty row's log(0) is -inf, as the op's)."""
    with np.errstate(all="ignore"):
        return _numpy_row_reference(np, entry, x, params, eps, dtype)


def _numpy_row_reference(
    np: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: float, dtype: Any
) -> Any:
    names = row_names(
        entry,
        np.asarray(x).astype(dtype),
        [None if p is None else np.asarray(p).astype(dtype) for p in params],
        dtype(eps),
        numpy_row_functions(np),
    )
    return np.asarray(evaluate_row(entry, entry.reference, names), dtype=dtype)
