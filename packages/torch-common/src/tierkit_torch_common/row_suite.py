"""The row reductions' test suite, every ROW_REDUCTIONS entry of the op table
in one torch namespace: each torch tier's ``tests/test_rows.py`` imports
these tests and gives them its namespace (the ``ops`` fixture), so a new
entry is tested by torch-cpu's and torch-stable's suites with no new test
code (the guard test ``tests/test_every_suite_reads_the_table.py`` checks it).

Every test compares with aten's ``torch.nn.functional.<name>(x, (d,),
*params, eps)`` and with float64 or the
entry's own formula in extended precision: values and accuracy per dtype,
mixed dtypes, the default eps, empty and strided rows, determinism across
thread counts, errors (the real and the fake kernel alike), gradients in both
modes and their accuracy, vmap without the fallback, compile (fullgraph,
dynamic, backward) and opcheck; the fused residual form where the entry has
one. Like ``testing``, it imports torch and is for test suites only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tierkit_core.op_table import ROW_REDUCTIONS, RowReduction
from tierkit_core.op_testing import dtype_pairs, numpy_row_reference

__all__ = [
    "DTYPES",
    "ENTRIES",
    "FUSED",
    "WITH_PARAMS",
    "aten",
    "last",
    "make",
    "make_params",
    "test_a_0d_x_as_aten",
    "test_along_any_dim_as_aten",
    "test_at_least_as_accurate_as_aten",
    "test_bit_identical_for_one_and_two_threads",
    "test_compile_fullgraph_dynamic_forward_and_backward",
    "test_default_eps_empty_zero_and_strided_rows",
    "test_errors_name_the_argument",
    "test_errors_with_grad_name_the_op_called",
    "test_fused_add_gradients",
    "test_fused_add_in_place",
    "test_fused_add_in_place_is_functionalized_under_compile",
    "test_fused_add_is_the_add_then_the_norm",
    "test_gradcheck_gradgradcheck_and_forward_ad",
    "test_gradients_as_accurate_as_aten",
    "test_infinite_and_nan_rows_as_aten",
    "test_opcheck",
    "test_parameters_of_another_dtype_as_aten",
    "test_parameters_of_another_dtype_give_the_widened_calls_bits",
    "test_vmap_fused_add_in_place",
    "test_vmap_over_batched_parameters_rounds_once",
    "test_vmap_without_fallback",
]

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
ENTRIES = pytest.mark.parametrize("entry", ROW_REDUCTIONS, ids=[e.name for e in ROW_REDUCTIONS])
_FUSED = [e for e in ROW_REDUCTIONS if e.fused_add]
FUSED = pytest.mark.parametrize("entry", _FUSED, ids=[e.name for e in _FUSED])
# The entries with per-column parameters (the norms; an op along a dim has none): what
# the mixed-dtype and batched-parameter rules are about.
_WITH_PARAMS = [e for e in ROW_REDUCTIONS if e.params]
WITH_PARAMS = pytest.mark.parametrize("entry", _WITH_PARAMS, ids=[e.name for e in _WITH_PARAMS])


def make(shape: Any, dtype: Any, gen: Any, scale: float = 3.0) -> Any:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def make_params(entry: RowReduction, d: int, dtype: Any, gen: Any, grad: bool = False) -> list[Any]:
    """One value per parameter, non-trivial: a weight near 1, a bias near 0."""
    out = []
    for p in entry.params:
        t = (float(p == "weight") + make((d,), torch.float64, gen, 0.5)).to(dtype)
        out.append(t.requires_grad_() if grad else t)
    return out


def subsets(params: list[Any]) -> list[list[Any]]:
    """None of the parameters, all of them, and (with two) each alone."""
    n = len(params)
    cases = [[None] * n, list(params)]
    if n > 1:
        cases += [[params[j] if j == i else None for j in range(n)] for i in range(n)]
    return cases


def last(entry: RowReduction, eps: Any) -> Any:
    """The op's trailing argument in a call over the last dim: its eps, or its dim (-1)."""
    return -1 if entry.has_dim else eps


def aten(entry: RowReduction, x: Any, params: Any, eps: Any = "default") -> Any:
    """aten's function for the entry, over the last dim; eps left out by default."""
    if entry.has_dim:  # torch.<name>(x, -1)
        return getattr(torch, entry.name)(x, -1)
    f = getattr(F, entry.name)
    if eps == "default":
        return f(x, (x.shape[-1],), *params)
    return f(x, (x.shape[-1],), *params, eps)


def op(ops: Any, entry: RowReduction, name: str | None = None) -> Any:
    return getattr(ops, name or entry.name)


def reference(entry: RowReduction, x: Any, params: Any, eps: float) -> Any:
    """The entry's formula in x87 extended precision (numpy's longdouble), as float64."""
    arrays = [None if p is None else p.detach().double().numpy() for p in params]
    wide = numpy_row_reference(np, entry, x.double().numpy(), arrays, eps, np.longdouble)
    return torch.from_numpy(wide.astype(np.float64))


def err(y: Any, ref: Any) -> float:
    return (y.detach().double() - ref).abs().max().item() if y.numel() else 0.0


def prefix(ops: Any) -> str:
    return f"{ops.name}::"


# ---- values ------------------------------------------------------------------------


@ENTRIES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 64), (5, 1), (3, 4097)], ids=str)
def test_at_least_as_accurate_as_aten(ops, entry, shape, dtype, gen):
    x = make(shape, dtype, gen) + 0.5
    for params in subsets(make_params(entry, shape[-1], dtype, gen)):
        ref = reference(entry, x, params, 1e-6)
        ours = op(ops, entry)(x, *params, last(entry, 1e-6))
        assert ours.dtype == dtype and ours.shape == x.shape and ours.is_contiguous()
        ulp = torch.finfo(dtype).eps * ref.abs().max().item()
        mine, theirs = err(ours, ref), err(aten(entry, x, params, 1e-6), ref)
        assert mine <= theirs + ulp, (entry.name, [p is not None for p in params], mine, theirs)


MIXED = dtype_pairs(
    "bfloat16/float32 float16/float32 float32/float64 float64/float32 float32/bfloat16", torch
)


@WITH_PARAMS
@pytest.mark.parametrize(("xd", "pd"), MIXED, ids=[f"{a}-x-{b}-params" for a, b in MIXED])
def test_parameters_of_another_dtype_as_aten(ops, entry, xd, pd, gen):
    # aten's rule: parameters of any float dtype, computed in x's compute type
    # (float32 for 16-bit x; float64 where x or a parameter is), the output
    # rounded to x's dtype, each gradient in its input's. (Some of aten's CPU
    # norms accept only 16-bit x with float32 parameters and refuse the rest;
    # tierkit computes those as the rule says.)
    x = make((6, 40), xd, gen).requires_grad_()
    params = make_params(entry, 40, pd, gen, grad=True)
    ours = op(ops, entry)(x, *params, last(entry, 1e-5))
    c = torch.float64 if torch.float64 in (xd, pd) else torch.float32
    theirs = aten(entry, x.to(c), [p.to(c) for p in params], 1e-5).to(xd)
    assert ours.dtype == xd
    torch.testing.assert_close(ours, theirs)
    g = make((6, 40), xd, gen, 1.0)
    mine = torch.autograd.grad(ours, (x, *params), g)
    want = torch.autograd.grad(theirs, (x, *params), g)
    for m, w, t in zip(mine, want, (x, *params)):
        assert m.dtype == t.dtype
        small = torch.finfo(xd).bits == 16
        torch.testing.assert_close(m, w, rtol=2e-2 if small else 1e-5, atol=1e-2 if small else 1e-6)
    if xd in (torch.float16, torch.bfloat16) and pd == torch.float32:  # the case aten's kernels take as is
        torch.testing.assert_close(ours, aten(entry, x, params, 1e-5))


# x's dtype, the parameters' (one each, or a pair for weight and bias).
MIXED_BITS = [
    (torch.bfloat16, (torch.float32, torch.float32)),
    (torch.float16, (torch.float32, torch.float32)),
    (torch.bfloat16, (torch.bfloat16, torch.float32)),
    (torch.float32, (torch.bfloat16, torch.float16)),
]


@WITH_PARAMS
@pytest.mark.parametrize(
    ("xd", "pds"), MIXED_BITS, ids=[f"{a}-x-{'-'.join(map(str, b))}-params" for a, b in MIXED_BITS]
)
def test_parameters_of_another_dtype_give_the_widened_calls_bits(ops, entry, xd, pds, gen):
    # A mixed call is the call on x and the parameters in the compute type,
    # rounded to x's dtype (each gradient to its input's), bit for bit: the
    # CPU kernels take the parameters in the compute type beside x as it is
    # (one pass), the other kernels convert; both must give these bits.
    # Rows of 4100: a tail after the vector blocks.
    x = make((9, 4100), xd, gen).requires_grad_()
    params = [
        p.to(pd).detach().requires_grad_() for p, pd in zip(make_params(entry, 4100, torch.float64, gen), pds)
    ]
    c = torch.float32
    xc = x.detach().to(c).requires_grad_()
    pc = [p.detach().to(c).requires_grad_() for p in params]
    ours = op(ops, entry)(x, *params, last(entry, 1e-5))
    want = op(ops, entry)(xc, *pc, last(entry, 1e-5))
    assert ours.dtype == xd and torch.equal(ours, want.to(xd))
    g = make((9, 4100), xd, gen, 1.0)
    mine = torch.autograd.grad(ours, (x, *params), g)
    wide = torch.autograd.grad(want, (xc, *pc), g.to(c))
    for m, w, t in zip(mine, wide, (x, *params)):
        assert m.dtype == t.dtype and torch.equal(m, w.to(t.dtype))
    if entry.fused_add:
        r = make((9, 4100), xd, gen)
        y, h = op(ops, entry, entry.add_name)(x.detach(), r, *[p.detach() for p in params], 1e-5)
        h_want = x.detach() + r
        assert torch.equal(h, h_want)
        assert torch.equal(y, op(ops, entry)(h_want.to(c), *[p.detach().to(c) for p in params], 1e-5).to(xd))


@ENTRIES
def test_default_eps_empty_zero_and_strided_rows(ops, entry, gen):
    x = make((6, 16), torch.float32, gen) * 1e-4  # small rows, where eps matters
    torch.testing.assert_close(op(ops, entry)(x), aten(entry, x, ()), atol=1e-6, rtol=2e-6)
    for shape in [(0, 4), (3, 0), (2, 0, 5)]:
        assert op(ops, entry)(torch.zeros(shape)).shape == shape
    z = torch.zeros(3, 8)
    ones = [torch.ones(8)] * len(entry.params)
    assert torch.equal(op(ops, entry)(z, *ones), aten(entry, z, ones))
    t = make((16, 12), torch.float32, gen).t()
    params = make_params(entry, 16, torch.float32, gen)
    torch.testing.assert_close(op(ops, entry)(t, *params, last(entry, 1e-6)), aten(entry, t, params, 1e-6))


@ENTRIES
def test_bit_identical_for_one_and_two_threads(ops, entry, gen):
    x = make((64, 4097), torch.float32, gen).requires_grad_()
    params = make_params(entry, 4097, torch.float32, gen, grad=True)
    before, results = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            y = op(ops, entry)(x, *params, last(entry, 1e-6))
            results.append((y.detach(), *torch.autograd.grad(y, (x, *params), torch.ones_like(y))))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*results))


_ALONG = [e for e in ROW_REDUCTIONS if e.has_dim]
ALONG = pytest.mark.parametrize("entry", _ALONG, ids=[e.name for e in _ALONG])


@ALONG
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_along_any_dim_as_aten(ops, entry, dtype, dim, gen):
    """Any dim, as aten's: the values at least as accurate against float64,
    the result contiguous, the gradient as aten's, under vmap and compile."""
    x = (make((5, 6, 33), dtype, gen) + 0.5).requires_grad_()
    ours = op(ops, entry)(x, dim)
    theirs = getattr(torch, entry.name)(x, dim)
    # The entry's formula in extended precision, along the last dim of x moved.
    ref = reference(entry, x.detach().movedim(dim, -1), [], 0.0).movedim(-1, dim)
    assert ours.dtype == dtype and ours.shape == x.shape and ours.is_contiguous()
    ulp = torch.finfo(dtype).eps * ref.abs().max().item()
    assert err(ours, ref) <= err(theirs, ref) + ulp
    g = make((5, 6, 33), dtype, gen, 1.0)
    (mine,) = torch.autograd.grad(ours, x, g)
    (want,) = torch.autograd.grad(theirs, x, g)
    if dtype == torch.float64:  # aten is the float64 reference: within a row sum's roundings of it
        bound = 4 * torch.finfo(dtype).eps * (want.abs().max() + g.abs().sum(dim).max()).item()
        assert err(mine, want) <= bound
    else:
        x64 = x.detach().double().requires_grad_()
        (exact,) = torch.autograd.grad(getattr(torch, entry.name)(x64, dim), x64, g.double())
        assert err(mine, exact) <= err(want, exact) + 2 * torch.finfo(dtype).eps * exact.abs().max().item()
    if dtype == torch.float32:
        # The examples lack x's dim 0: x's dim k > 0 is their k - 1 (a negative one the same).
        inner = dim - 1 if dim > 0 else dim
        if dim % 3 != 0:
            got = torch.vmap(lambda a: op(ops, entry)(a, inner))(x.detach())
            torch.testing.assert_close(got, getattr(torch, entry.name)(x.detach(), dim))
        fn = torch.compile(lambda a: op(ops, entry)(a, dim) * 2, fullgraph=True, dynamic=True)
        torch.testing.assert_close(fn(x.detach()), ours.detach() * 2)


@ALONG
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_infinite_and_nan_rows_as_aten(ops, entry, dtype):
    """-inf elements give 0 (log: -inf), an all -inf row NaN, a +inf or NaN element a NaN row: aten's."""
    inf, nan = float("inf"), float("nan")
    rows = [
        [0.0, -inf, 1.0, 2.0],
        [-inf, -inf, -inf, -inf],
        [1.0, inf, 0.0, 0.0],
        [nan, 1.0, 2.0, 3.0],
        [-inf, 5.0, -inf, -inf],
        [-0.0, 0.0, -0.0, 0.0],
    ]
    x = torch.tensor(rows, dtype=dtype)
    for dim in (-1, 0):
        ours, theirs = op(ops, entry)(x, dim), getattr(torch, entry.name)(x, dim)
        # The same NaNs and infinities where aten has them; the finite values within its roundings.
        assert torch.equal(ours.isnan(), theirs.isnan()) and torch.equal(ours.isinf(), theirs.isinf())
        torch.testing.assert_close(ours, theirs, equal_nan=True)


@ALONG
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_0d_x_as_aten(ops, entry, dtype):
    """aten takes a scalar along dim -1 or 0 (one row of one element): the
    value, its gradient, vmap over such examples and a fake's shape as aten's;
    any other dim refused in core's words."""
    f = op(ops, entry)
    for value in (2.5, float("-inf"), float("nan")):
        x = torch.tensor(value, dtype=dtype, requires_grad=True)
        for dim in (-1, 0):
            ours, theirs = f(x, dim), getattr(torch, entry.name)(x, dim)
            assert ours.shape == () and ours.dtype == dtype
            torch.testing.assert_close(ours, theirs, equal_nan=True)
            if value == 2.5:
                mine, want = (
                    torch.autograd.grad(y, x, torch.tensor(0.75, dtype=dtype))[0] for y in (ours, theirs)
                )
                torch.testing.assert_close(mine, want)
    x = torch.tensor([1.0, -2.0, float("-inf")], dtype=dtype)
    torch.testing.assert_close(
        torch.vmap(lambda a: f(a, -1))(x),
        getattr(torch, entry.name)(x.unsqueeze(-1), -1).squeeze(-1),
        equal_nan=True,
    )
    assert f(torch.empty((), dtype=dtype, device="meta"), 0).shape == ()
    for device in ("cpu", "meta"):
        with pytest.raises(
            RuntimeError,
            match=rf"{entry.name}: dim: expected a dim in \[-1, 1\) for x of 0 dimensions, got 1",
        ):
            f(torch.tensor(1.0, dtype=dtype, device=device), 1)


# ---- errors: the real and the fake kernel say the same ---------------------------


def error_cases(entry: RowReduction) -> list[tuple[Any, str]]:
    p = len(entry.params)
    # Each case: (x, the arguments after it) on a device, and what the error says.
    cases: list[tuple[Any, str]] = (
        []
        if entry.has_dim
        else [  # along a dim: a 0-d x is aten's too
            (
                lambda d: (torch.tensor(1.0, device=d), [None] * p),
                r"x: expected a tensor with at least one dimension",
            ),
        ]
    )
    cases += [
        (
            lambda d: (torch.ones(3, 4, dtype=torch.int32, device=d), [None] * p),
            r"x: expected dtype .*, got int32",
        ),
    ]
    if entry.has_dim:  # a dim out of range, past either end
        cases += [
            (
                lambda d: (torch.ones(3, 4, device=d), [2]),
                r"dim: expected a dim in \[-2, 2\) for x of 2 dimensions, got 2",
            ),
            (
                lambda d: (torch.ones(4, device=d), [-2]),
                r"dim: expected a dim in \[-1, 1\) for x of 1 dimension, got -2",
            ),
        ]
    for i, name in enumerate(entry.params):
        cases += [
            (
                _with_param(p, i, lambda d: torch.ones(5, device=d)),
                rf"{name}: expected shape \[4\] .*got \[5\]",
            ),
            (_with_param(p, i, lambda d: torch.ones(2, 2, device=d)), rf"{name}: expected shape \[4\]"),
            (
                _with_param(p, i, lambda d: torch.ones(4, dtype=torch.int32, device=d)),
                rf"{name}: expected dtype float32, float64, float16 or bfloat16, got int32",
            ),
        ]
    return cases


def _with_param(p: int, i: int, make_param: Any) -> Any:
    """Arguments (x of [3, 4], parameter i from make_param(device), the others None) on a device."""
    return lambda d: (torch.ones(3, 4, device=d), [make_param(d) if j == i else None for j in range(p)])


ERROR_CASES = [(e, i) for e in ROW_REDUCTIONS for i in range(len(error_cases(e)))]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("entry", "case"), ERROR_CASES, ids=[f"{e.name}-{i}" for e, i in ERROR_CASES])
def test_errors_name_the_argument(ops, entry, case, device):
    make_args, pattern = error_cases(entry)[case]
    x, params = make_args(device)
    with pytest.raises(RuntimeError, match=prefix(ops) + entry.name + ": " + pattern):
        op(ops, entry)(x, *params)


@pytest.mark.parametrize(("entry", "case"), ERROR_CASES, ids=[f"{e.name}-{i}" for e, i in ERROR_CASES])
def test_kernel_and_fake_refuse_in_the_same_words(ops, entry, case):
    # The CPU kernel asks core's C++ rules, the fake kernel core's Python
    # twin (tierkit_core.row_rules): one message, word for word.
    make_args, _ = error_cases(entry)[case]
    said = []
    for device in ("cpu", "meta"):
        x, params = make_args(device)
        with pytest.raises(RuntimeError) as info:
            op(ops, entry)(x, *params)
        said.append(str(info.value).split("\n")[0])
    assert said[0] == said[1]


@ENTRIES
def test_errors_with_grad_name_the_op_called(ops, entry):
    x = torch.ones(3, 4, requires_grad=True)
    if entry.has_dim:
        with pytest.raises(
            RuntimeError, match=rf"{prefix(ops)}{entry.name}: dim: expected a dim in \[-2, 2\)"
        ):
            op(ops, entry)(x, -3)
        return
    last = entry.params[-1]
    bad = [None] * (len(entry.params) - 1) + [torch.ones(5)]
    with pytest.raises(RuntimeError, match=rf"{prefix(ops)}{entry.name}: {last}: expected shape \[4\]"):
        op(ops, entry)(x, *bad)
    if entry.fused_add:
        with pytest.raises(
            RuntimeError, match=rf"{prefix(ops)}{entry.add_name}: residual: expected shape \[3, 4\]"
        ):
            op(ops, entry, entry.add_name)(x, torch.ones(3, 5))


# ---- autograd -----------------------------------------------------------------------


@ENTRIES
def test_gradcheck_gradgradcheck_and_forward_ad(ops, entry, gen):
    x = make((3, 7), torch.float64, gen).requires_grad_()
    for params in subsets(make_params(entry, 7, torch.float64, gen, grad=True)):
        present = [i for i, p in enumerate(params) if p is not None]

        def fn(a, *ps, present=present):
            full = [None] * len(entry.params)
            for i, t in zip(present, ps):
                full[i] = t
            return op(ops, entry)(a, *full, last(entry, 1e-5))

        args = (x, *(params[i] for i in present))
        assert torch.autograd.gradcheck(fn, args, check_forward_ad=True)
        assert torch.autograd.gradgradcheck(fn, args)


@ENTRIES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_as_accurate_as_aten(ops, entry, dtype, gen):
    x = (make((8, 64), dtype, gen) + 0.5).requires_grad_()
    params = make_params(entry, 64, dtype, gen, grad=True)
    g = make((8, 64), dtype, gen, 1.0)
    ours = torch.autograd.grad(op(ops, entry)(x, *params, last(entry, 1e-6)), (x, *params), g)
    theirs = torch.autograd.grad(aten(entry, x, params, 1e-6), (x, *params), g)
    x64 = x.detach().double().requires_grad_()
    p64 = [p.detach().double().requires_grad_() for p in params]
    ref = torch.autograd.grad(aten(entry, x64, p64, 1e-6), (x64, *p64), g.double())
    # In float64 aten is the reference itself: ours within a row sum's roundings of it.
    sums = g.double().abs().sum(-1).max().item() if dtype == torch.float64 else 0.0
    for o, a, r in zip(ours, theirs, ref):
        assert o.dtype == dtype
        assert err(o, r) <= err(a, r) + 2 * torch.finfo(dtype).eps * (r.abs().max().item() + sums), (
            err(o, r),
            err(a, r),
        )


# ---- vmap ---------------------------------------------------------------------------


@ENTRIES
@pytest.mark.parametrize("in_dims", [(0, None), (1, None), (0, 0), (None, 0)])
def test_vmap_without_fallback(ops, entry, in_dims, gen):
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        x = make((4, 3, 8), torch.float32, gen)
        if in_dims[0] is None:
            if not entry.params:
                pytest.skip(f"{entry.name} has no parameter to batch")
            x = x[0]
        batch = 4 if in_dims[0] != 1 else 3
        params = [
            make((batch, 8), torch.float32, gen, 1.0) if in_dims[1] == 0 else p
            for p in make_params(entry, 8, torch.float32, gen)
        ]
        dims = (in_dims[0], *([in_dims[1]] * len(params)))
        got = torch.vmap(lambda a, *ps: op(ops, entry)(a, *ps, last(entry, 1e-6)), in_dims=dims)(x, *params)
        want = torch.vmap(lambda a, *ps: aten(entry, a, ps, 1e-6), in_dims=dims)(x, *params)
        torch.testing.assert_close(got, want)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


@WITH_PARAMS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("form", ["op", "add"])
def test_vmap_over_batched_parameters_rounds_once(ops, entry, dtype, form, gen):
    """Per-example parameters in 16 bits: the batch rule rounds once, as each
    example's own call does (it rounded two or three times: 26% of elements
    off, 1.38 ulp from float64 against 0.50)."""
    if form == "add" and not entry.fused_add:
        pytest.skip(f"{entry.name} has no fused residual form")
    n, d = 4, 64
    x, r = make((n, 3, d), dtype, gen), make((n, 3, d), dtype, gen)
    params = [(float(p == "weight") + make((n, d), torch.float64, gen, 0.5)).to(dtype) for p in entry.params]
    if form == "op":
        f = lambda a, b, *ps: op(ops, entry)(a, *ps, last(entry, 1e-6))  # noqa: E731
    else:
        f = lambda a, b, *ps: op(ops, entry, entry.add_name)(a, b, *ps, last(entry, 1e-6))[0]  # noqa: E731
    for case in subsets(params)[1:]:
        batched = [p for p in case if p is not None]
        dims = (0, 0, *(0 if p is not None else None for p in case))
        got = torch.vmap(f, in_dims=dims)(x, r, *case)
        each = torch.stack([f(x[i], r[i], *(None if p is None else p[i] for p in case)) for i in range(n)])
        assert batched and torch.equal(got, each), (got.float() - each.float()).abs().max()


@FUSED
@pytest.mark.parametrize("batched_params", [False, True])
@pytest.mark.parametrize("x_dim", [0, 1, None])
def test_vmap_fused_add_in_place(ops, entry, batched_params, x_dim, gen):
    """vmap of the in-place form: each example's residual becomes its h, y
    as the per-example calls give (it had no batch rule)."""
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        n, d = 4, 16
        x, r = make((n, 3, d), torch.bfloat16, gen), make((n, 3, d), torch.bfloat16, gen)
        xin = {0: x, 1: x.transpose(0, 1).contiguous(), None: x[0]}[x_dim]
        params = make_params(entry, d, torch.bfloat16, gen)
        if batched_params:
            params = [(p + make((n, d), torch.float64, gen, 0.1)).to(p.dtype) for p in params]
        pdim = 0 if batched_params else None
        in_place = op(ops, entry, entry.add_name + "_")
        r_want = r.clone()
        want = torch.stack(
            [
                in_place(
                    x[0] if x_dim is None else x[i],
                    r_want[i],
                    *(p[i] if batched_params else p for p in params),
                    1e-6,
                )
                for i in range(n)
            ]
        )
        got = torch.vmap(
            lambda a, b, *ps: in_place(a, b, *ps, 1e-6), in_dims=(x_dim, 0, *[pdim] * len(params))
        )(xin, r, *params)
        assert torch.equal(r, r_want)
        assert torch.equal(got, want)
        with pytest.raises(RuntimeError, match=r"writes into `residual`, which is not batched"):
            torch.vmap(lambda a, b: in_place(a, b, *params, 1e-6), in_dims=(0, None))(x, r[0])
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


# ---- compile and opcheck ---------------------------------------------------------------


@ENTRIES
def test_compile_fullgraph_dynamic_forward_and_backward(ops, entry, gen):
    x = make((6, 32), torch.float32, gen).requires_grad_()
    params = make_params(entry, 32, torch.float32, gen, grad=True)
    fn = torch.compile(
        lambda a, *ps: op(ops, entry)(a, *ps, last(entry, 1e-6)) * 2, fullgraph=True, dynamic=True
    )
    y = fn(x, *params)
    eager = op(ops, entry)(x, *params, last(entry, 1e-6)) * 2
    torch.testing.assert_close(y, eager)
    got = torch.autograd.grad(y.sum(), (x, *params))
    want = torch.autograd.grad(eager.sum(), (x, *params))
    torch.testing.assert_close(got, want)
    x2 = make((10, 32), torch.float32, gen)
    torch.testing.assert_close(fn(x2, *params), op(ops, entry)(x2, *params, last(entry, 1e-6)) * 2)


def opcheck_cases(entry: RowReduction) -> list[tuple[str, Any]]:
    def args(shape: Any, dtype: Any, grad: bool, with_params: bool, eps: Any) -> Any:
        def build(g: Any) -> tuple[Any, ...]:
            x = make(shape, dtype, g).requires_grad_(grad)
            ps = (
                make_params(entry, shape[-1], dtype, g, grad=grad)
                if with_params
                else [None] * len(entry.params)
            )
            return (x, *ps, last(entry, eps))

        return build

    default = entry.eps  # None where the schema's eps is optional
    cases = [
        (entry.name, args((3, 8), torch.float32, True, False, 1e-5)),
        (entry.name, args((2, 3, 8), torch.float64, False, True, default)),
        (entry.name, args((3, 8), torch.float32, True, True, default)),
    ]
    if entry.has_dim:  # along a leading dim

        def along(g: Any) -> tuple[Any, ...]:
            return (make((4, 3, 8), torch.float32, g).requires_grad_(), 0)

        cases.append((entry.name, along))
    if entry.fused_add:

        def fused(grad: bool) -> Any:
            def build(g: Any) -> tuple[Any, ...]:
                x, r = make((3, 8), torch.float32, g).requires_grad_(grad), make((3, 8), torch.float32, g)
                return (x, r, *make_params(entry, 8, torch.float32, g, grad=grad), 1e-6)

            return build

        cases += [
            (entry.add_name, fused(False)),
            (entry.add_name, fused(True)),
            (entry.add_name + "_", fused(False)),
        ]
    return cases


OPCHECKS = [(e, i) for e in ROW_REDUCTIONS for i in range(len(opcheck_cases(e)))]


@pytest.mark.parametrize(("entry", "case"), OPCHECKS, ids=[f"{e.name}-{i}" for e, i in OPCHECKS])
def test_opcheck(ops, entry, case, gen):
    name, args = opcheck_cases(entry)[case]
    result = torch.library.opcheck(getattr(ops, name).default, args(gen))
    assert all(v == "SUCCESS" for v in result.values()), result


# ---- the fused residual form ----------------------------------------------------------


@FUSED
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_is_the_add_then_the_norm(ops, entry, dtype, gen):
    x, r = make((5, 40), dtype, gen), make((5, 40), dtype, gen)
    params = make_params(entry, 40, dtype, gen)
    y, h = op(ops, entry, entry.add_name)(x, r, *params, last(entry, 1e-6))
    assert torch.equal(h, x + r)  # rounded to the dtype first, as the model would
    assert torch.equal(y, op(ops, entry)(x + r, *params, last(entry, 1e-6)))


@FUSED
def test_fused_add_gradients(ops, entry, gen):
    x = make((3, 6), torch.float64, gen).requires_grad_()
    r = make((3, 6), torch.float64, gen).requires_grad_()
    params = make_params(entry, 6, torch.float64, gen, grad=True)
    fused = op(ops, entry, entry.add_name)
    assert torch.autograd.gradcheck(lambda *a: fused(*a, 1e-5), (x, r, *params), check_forward_ad=True)


@FUSED
def test_fused_add_in_place(ops, entry, gen):
    x, r = make((4, 16), torch.float32, gen), make((4, 16), torch.float32, gen)
    params = make_params(entry, 16, torch.float32, gen)
    want_y, want_h = op(ops, entry, entry.add_name)(x, r, *params, last(entry, 1e-6))
    version = r._version
    in_place = op(ops, entry, entry.add_name + "_")
    y = in_place(x, r, *params, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(r, want_h) and r._version > version
    strided = torch.empty(16, 4).t()
    strided.copy_(want_h - x)
    in_place(x, strided, *params, 1e-6)  # a strided residual is written in place
    torch.testing.assert_close(strided, want_h)
    with pytest.raises(RuntimeError, match=rf"{entry.add_name}_: writes into `residual` .*requires grad"):
        in_place(x.requires_grad_(), r, *params)


@FUSED
def test_fused_add_in_place_is_functionalized_under_compile(ops, entry, gen):
    x, r = make((4, 16), torch.float32, gen), make((4, 16), torch.float32, gen)
    r2 = r.clone()
    in_place = op(ops, entry, entry.add_name + "_")
    nones = [None] * len(entry.params)

    @torch.compile(fullgraph=True)
    def step(a, b):
        return in_place(a, b, *nones, 1e-6) * 2

    y = step(x, r)
    want = in_place(x, r2, *nones, 1e-6) * 2
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(r, r2)
