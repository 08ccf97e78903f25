"""The row ops' argument rules by role, for Python callers (the torch tiers'
fake kernels and the stable tier's autograd): the same rules and words as
core's C++ ``tierkit/row_rules.h``, which the kernels ask; a test checks
that both say the same for the same arguments.

Each rule yields ``(ok, message)`` pairs in order, ``message`` a thunk:
callers pass them to ``torch._check(ok, ...)`` (so a symbolic size is
compared as torch compares it) or raise where ``ok`` is false. Sizes are
any sequences of ints (or torch's SymInts); ``words`` is how the caller
names things (``TORCH``: the only Python caller's; the numpy bridge asks
the C++ rules). No torch here: core knows none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TORCH",
    "Words",
    "compute_dtype",
    "dim",
    "gathered_dtype",
    "gathered_table",
    "index_dtype",
    "indexed_heads",
    "param_shape",
    "same_device",
    "same_dtype",
    "shape_str",
    "stats",
    "table_rank",
    "tables_fit",
    "x_rank",
]

Rule = Iterator[tuple[Any, Callable[[], str]]]


@dataclass(frozen=True)
class Words:
    noun: str
    zero_d: str
    last_dim: str
    tuples: bool  # (2, 3) as numpy prints a shape, else [2, 3]

    @property
    def a_noun(self) -> str:
        return f"{'an' if self.noun[0] == 'a' else 'a'} {self.noun}"


TORCH = Words("tensor", "a 0-d tensor", ".size(-1)", tuples=False)


def shape_str(sizes: Sequence[Any], words: Words) -> str:
    """A shape as core's shape_str spells it: [2, 3], or (2, 3) and (3,)."""
    inner = ", ".join(str(s) for s in sizes)
    if not words.tuples:
        return f"[{inner}]"
    return f"({inner},)" if len(sizes) == 1 else f"({inner})"


def x_rank(rank: int, why: str | None, words: Words) -> Rule:
    """x: the rows, along its last dim; `why`: what that dim is for."""
    reason = f" ({why})" if why else ""
    yield (
        rank >= 1,
        lambda: f"x: expected {words.a_noun} with at least one dimension{reason}, got {words.zero_d}",
    )


def dim(name: str, value: int, rank: int, words: Words) -> Rule:
    """The dim an op runs along: in [-rank, rank), as torch wraps a dim, a
    0-d x's as a 1-d one's (-1 or 0: aten's ops along a dim take a scalar so)."""
    s = "" if rank == 1 else "s"
    n = max(rank, 1)
    yield (
        -n <= value < n,
        lambda: f"{name}: expected a dim in [{-n}, {n}) for x of {rank} dimension{s}, got {value}",
    )


def param_shape(name: str, got: Sequence[Any], d: Any, words: Words) -> Rule:
    """A per-column parameter (weight, bias): shape [x.size(-1)]."""
    yield (
        len(got) == 1 and got[0] == d,
        lambda: (
            f"{name}: expected shape {shape_str([d], words)} (x's last dimension), got {shape_str(got, words)}"
        ),
    )


def table_rank(name: str, rank: int, words: Words) -> Rule:
    yield (
        rank >= 1,
        lambda: (
            f"{name}: expected {words.a_noun} with at least one dimension (its last is the width r), got "
            f"{words.zero_d}"
        ),
    )


def tables_fit(
    x: Sequence[Any], tables: Sequence[Sequence[Any]], names: Sequence[str], rule: str, words: Words
) -> Rule:
    """Per-row tables [..., r]: the first's last dim is the width r (even,
    and `rule`), every table has it, and each broadcasts against x's
    leading dims without enlarging x."""
    r, d, first = tables[0][-1], x[-1], names[0]
    yield (
        r % 2 == 0 and r <= d,
        lambda: f"{first}: expected a width r = {first}{words.last_dim} that is {rule} ({d}), got {r}",
    )
    for name, t in zip(names, tables):

        def other_width(name: str = name, t: Sequence[Any] = t) -> str:
            return f"{name}: expected a last dimension of {r} (the width, {first}'s), got {t[-1]}"

        def no_broadcast(name: str = name, t: Sequence[Any] = t) -> str:
            return (
                f"{name}: shape {shape_str(list(t), words)} does not broadcast against "
                f"x[..., :{r}] of shape {shape_str([*x[:-1], r], words)}"
            )

        yield t[-1] == r, other_width
        yield (
            len(t) <= len(x) and all(s == 1 or s == xs for s, xs in zip(reversed(t[:-1]), reversed(x[:-1]))),
            no_broadcast,
        )


def indexed_heads(
    name: str,
    x: Sequence[Any],
    index: Sequence[Any],
    index_name: str,
    size: int,
    size_name: str,
    words: Words,
) -> Rule:
    """An x indexed row by row: its leading dims are the index's shape, and
    each token's row after them holds whole heads of `size` elements (the
    size role, named `size_name`)."""
    yield (
        len(x) > len(index) and all(a == b for a, b in zip(x, index)),
        lambda: (
            f"{name}: expected {index_name}'s shape {shape_str(list(index), words)} as its leading dims and "
            f"a token's heads after them, got shape {shape_str(list(x), words)}"
        ),
    )
    per_token = 1
    for s in x[len(index) :]:
        per_token *= s
    yield (
        size > 0 and per_token % size == 0,
        lambda: (
            f"{name}: expected whole heads of {size_name} ({size}) a token, got {per_token} elements a token"
        ),
    )


def gathered_table(name: str, t: Sequence[Any], size: int, size_name: str, words: Words) -> Rule:
    """A table gathered by an index: [rows, r], r even and 0 < r <= size."""
    yield (
        len(t) == 2 and 0 < t[1] <= size and t[1] % 2 == 0,
        lambda: (
            f"{name}: expected shape [rows, r] with r even, at most {size_name} ({size}), got "
            f"{shape_str(list(t), words)}"
        ),
    )


def index_dtype(name: str, got: str) -> Rule:
    """The index role's dtype: int64 or int32."""
    yield got in ("int64", "int32"), lambda: f"{name}: expected dtype int64 or int32, got {got}"


def gathered_dtype(name: str, x: str, x_dtype: str, got: str) -> Rule:
    """A gathered table's dtype: x's (named `x`), or beside a narrower x its
    compute type (a float32 cache beside bfloat16 activations)."""
    compute = compute_dtype(x_dtype)
    wanted = (
        f"{x_dtype} ({x}'s)" if x_dtype == compute else f"{x_dtype} or {compute} ({x}'s or its compute type)"
    )
    yield got in (x_dtype, compute), lambda: f"{name}: expected dtype {wanted}, got {got}"


def same_dtype(name: str, x: str, want: str, got: str) -> Rule:
    """A role of another's dtype (the second x written in place: the first's)."""
    yield got == want, lambda: f"{name}: expected dtype {want} (same as {x}), got {got}"


def same_device(name: str, x: str, want: str, got: str) -> Rule:
    """A tensor on another's device (devices by name)."""
    yield got == want, lambda: f"{name}: expected device {want} (same as {x}), got {got}"


def stats(got: int, got_dtype: str, want: int, want_dtype: str, source: str) -> Rule:
    """The stats a backward receives: as the forward `source` saved them."""
    yield (
        got == want and got_dtype == want_dtype,
        lambda: (
            f"stats: expected {want} values of dtype {want_dtype} (from {source}), got {got} of {got_dtype}"
        ),
    )


def compute_dtype(x: str, params: Sequence[str | None] = ()) -> str:
    """The dtype a row call computes in (core's ``mixed_dtypes``): float32,
    or float64 where x or a parameter is; dtypes by name, None for an
    absent parameter."""
    return "float64" if "float64" in (x, *params) else "float32"
