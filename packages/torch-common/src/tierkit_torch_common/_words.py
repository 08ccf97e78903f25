"""How the Python checks (fake.py, rows.py, row_maps.py) word a
dtype and a list of choices, as core's C++ messages do, and how they ask
core's row rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def one_of(names: Sequence[str]) -> str:
    """ "a", "a or b", "a, b or c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def ask(torch: Any, op: str, rule: Iterable[tuple[Any, Callable[[], str]]]) -> None:
    """Core's rule (tierkit_core.row_rules: the C++ kernels' rules and words)
    as torch checks: each condition through torch._check, so a symbolic size
    compares as torch compares it; the message prefixed with the op."""
    for ok, message in rule:
        torch._check(ok, lambda m=message: f"{op}: {m()}")
