"""The row reductions' Python side for any namespace that defines them
(``tierkit``: torch-cpu, ``tierkit_stable``: torch-stable), written once for
the op table's kind and instantiated per entry (``ROW_REDUCTIONS``): the
entry's reference formula over torch (what tests compare with and what
torch-stable's autograd differentiates), the mixed-dtype and eps rules.
Checks, fakes, faces, vmap rules and DTensor strategies are every row op's
(``row_ops.py``); kernels are each tier's. See
docs/reductions.md. torch is imported by the caller, this module only
receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tierkit_core import row_rules
from tierkit_core.op_table import RowReduction
from tierkit_core.op_testing import evaluate_row, row_names

__all__ = [
    "compute_dtype",
    "default_eps",
    "gradients",
    "reference",
]


def compute_dtype(torch: Any, x: Any, params: Sequence[Any] = ()) -> Any:
    """Float, or double where x or a parameter is double (core's mixed-dtype rule)."""
    name = row_rules.compute_dtype(_name(x), [None if p is None else _name(p) for p in params])
    return getattr(torch, name)


def _name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def default_eps(torch: Any, entry: RowReduction, x: Any, eps: float | None) -> float:
    """The eps a call computes with: its own, the entry's default, or torch's (machine epsilon)."""
    if eps is not None:
        return eps
    if entry.eps is not None:
        return entry.eps
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


def _split(rest: Sequence[Any], p: int, default: Any = None) -> tuple[tuple[Any, ...], Any]:
    """The parameters (padded with None where a call left defaults out) and
    what follows them (eps, or the stats; `default` when left out)."""
    params = tuple(rest[:p]) + (None,) * (p - len(rest[:p]))
    return params, (rest[p] if len(rest) > p else default)


def _row_sum(t: Any) -> Any:
    return t.sum(tuple(range(t.dim() - 1))) if t.dim() > 1 else t


def _names(
    torch: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: Any, grad: Any
) -> dict[str, Any]:
    """The formulas' names bound (core's row_names) over torch: the inputs in the compute type."""
    c = compute_dtype(torch, x, params)
    functions = {
        "row_mean": lambda t: t.mean(-1, keepdim=True),
        "row_total": lambda t: t.sum(-1, keepdim=True),
        "row_max": lambda t: t.amax(-1, keepdim=True),
        "row_sum": _row_sum,
        "rsqrt": torch.rsqrt,
        "exp": torch.exp,
        "log": torch.log,
    }
    return row_names(
        entry,
        x.to(c),
        [None if p is None else p.to(c) for p in params],
        default_eps(torch, entry, x, eps),
        functions,
        None if grad is None else grad.to(c),
    )


def reference(torch: Any, entry: RowReduction, x: Any, params: Sequence[Any], eps: float | None) -> Any:
    """The entry's value in the compute type (not rounded), differentiable."""
    return evaluate_row(entry, entry.reference, _names(torch, entry, x, params, eps, None))


def gradients(
    torch: Any, entry: RowReduction, grad: Any, x: Any, params: Sequence[Any], eps: float | None
) -> list[Any]:
    """Every input's gradient (x, then the parameters; None for an absent
    one) by the entry's formulas with torch's ops, in its input's dtype:
    differentiable, what double backward differentiates."""
    names = _names(torch, entry, x, params, eps, grad)
    out = [evaluate_row(entry, entry.derivatives["x"], names).to(x.dtype)]
    for name, p in zip(entry.params, params):
        out.append(None if p is None else evaluate_row(entry, entry.derivatives[name], names).to(p.dtype))
    return out


def normalized(torch: Any, entry: RowReduction, x: Any, stats: Any) -> Any:
    """x-hat from x (in the compute type) and the forward's stats ([..., len(entry.stats)])."""
    names: dict[str, Any] = {n: stats[..., i : i + 1] for i, n in enumerate(entry.stats)}
    names["x"] = x
    return eval(compile(entry.normalized, f"<{entry.name} x-hat>", "eval"), {"__builtins__": {}}, names)
