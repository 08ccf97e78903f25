"""How the Python checks (fake.py, rows.py, row_maps.py) word a
dtype and a list of choices, as core's C++ messages do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def one_of(names: Sequence[str]) -> str:
    """ "a", "a or b", "a, b or c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
