"""The bridge's row reductions for numpy arrays, every ROW_REDUCTIONS entry
of the op table (rms_norm, layer_norm): against the entry's formula in
extended precision and torch's F.<name>, every argument's error, out=, every
producer the pointwise ops take. A new entry is tested here with no new code."""

import numpy as np
import pytest
import tierkit_bridge as tb
from numpy_reference import row_reference
from tierkit_core.op_table import ROW_REDUCTIONS
from tierkit_core.op_testing import dtype_pairs

ENTRIES = pytest.mark.parametrize("entry", ROW_REDUCTIONS, ids=[e.name for e in ROW_REDUCTIONS])
# The entries with per-column parameters (the norms), whose dtype and keyword rules these are.
_WITH_PARAMS = [e for e in ROW_REDUCTIONS if e.params]
WITH_PARAMS = pytest.mark.parametrize("entry", _WITH_PARAMS, ids=[e.name for e in _WITH_PARAMS])


def op(entry):
    return getattr(tb, entry.name)


def last(entry, eps):
    """The function's last argument in a call over the last axis: its eps, or its axis (-1)."""
    return -1 if entry.has_dim else eps


def torch_ref(torch, entry, x, params, *eps):
    """torch's function for the entry over the last dim: F.<name>(x, (d,), *params, *eps), or torch.<name>(x, -1)."""
    if entry.has_dim:
        return getattr(torch, entry.name)(x, -1)
    return getattr(torch.nn.functional, entry.name)(x, (x.shape[-1],), *params, *eps)


def make_params(entry, d, dtype, rng):
    """One value per parameter, non-trivial: a weight near 1, a bias near 0."""
    base = {"weight": 1.0, "bias": 0.0}
    return [(base.get(p, 0.0) + 0.5 * rng.standard_normal(d)).astype(dtype) for p in entry.params]


def subsets(entry, params):
    """None of the parameters, all of them, and each alone."""
    p = len(params)
    yield [None] * p
    yield list(params)
    if p > 1:
        for i in range(p):
            yield [params[j] if j == i else None for j in range(p)]


@ENTRIES
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 64), (7, 1), (5,)])
def test_matches_extended_precision(entry, dtype, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(dtype)
    for params in subsets(entry, make_params(entry, shape[-1], dtype, rng)):
        got = op(entry)(x, *params, last(entry, 1e-6))
        assert got.dtype == x.dtype and got.shape == x.shape
        want = row_reference(entry, x, params, 1e-6)
        # Rounded once from float (double) accumulation: within an ulp of the
        # exact result's magnitude (layer_norm's mean subtraction: 2).
        ulp = 2 * np.finfo(dtype).eps * np.abs(want).max()
        assert np.abs(got.astype(np.longdouble) - want).max() <= ulp, params


MIXED = dtype_pairs("float16/float32 float32/float64 float64/float32 float16/float64 float32/float16", np)


@WITH_PARAMS
@pytest.mark.parametrize(("xd", "wd"), MIXED, ids=[f"{np.dtype(a)}-x-{np.dtype(b)}-params" for a, b in MIXED])
def test_parameters_of_another_dtype_are_computed_in_xs_compute_type(entry, xd, wd):
    # As torch's norms: the parameters converted to x's compute type (float32
    # for float16 x; float64 where one is float64), the result rounded once to
    # x's dtype; out= alike. With two parameters, one of each dtype too.
    # Rows of 1030: vector blocks and a tail. (float16 x with float32
    # parameters runs in one pass, the parameters widened beside x: the bits
    # of the same-dtype call in float32 all the same.)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 1030)) * 3).astype(xd)
    params = make_params(entry, 1030, wd, rng)
    cases = [params]
    if len(params) > 1:
        cases.append([params[0].astype(xd), *params[1:]])
    for ps in cases:
        got = op(entry)(x, *ps, 1e-6)
        assert got.dtype == xd and got.shape == x.shape
        work = np.float64 if np.float64 in (xd, *(p.dtype for p in ps)) else np.float32
        # The same-dtype kernel in the compute type, then rounded.
        same = op(entry)(x.astype(work), *(p.astype(work) for p in ps), 1e-6).astype(xd)
        np.testing.assert_array_equal(got, same)
        want = row_reference(entry, x, [p.astype(work) for p in ps], 1e-6)
        assert np.abs(got.astype(np.longdouble) - want).max() <= 2 * np.finfo(xd).eps * np.abs(want).max()
        out = np.empty((1030, 5), xd).T  # strided out
        assert op(entry)(x, *ps, 1e-6, out=out) is out
        np.testing.assert_array_equal(out, got)


@WITH_PARAMS
def test_parameters_of_another_dtype_with_torch_bfloat16_are_torchs(entry):
    torch = pytest.importorskip("torch")
    x = (torch.randn(6, 40) * 3).bfloat16()
    params = [torch.from_numpy(p) for p in make_params(entry, 40, np.float32, np.random.default_rng(5))]
    got = op(entry)(x, *params, 1e-6)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    want = getattr(torch.nn.functional, entry.name)(x, (40,), *params, 1e-6)
    torch.testing.assert_close(got, want)


@ENTRIES
def test_agrees_with_torch_and_its_default_eps(entry):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40)).astype(np.float32) * 1e-3  # small: eps matters
    params = make_params(entry, 40, np.float32, rng)
    # The default eps (the table's, or torch's machine epsilon) left out on both sides.
    want = torch_ref(torch, entry, torch.from_numpy(x), list(map(torch.from_numpy, params)))
    np.testing.assert_allclose(op(entry)(x, *params), want.numpy(), rtol=1e-6, atol=1e-6)
    if entry.has_eps:
        assert np.abs(op(entry)(x, *params) - op(entry)(x, *params, 1e-2)).max() > 1e-3  # eps is read


@WITH_PARAMS
def test_parameters_by_keyword(entry):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    params = make_params(entry, 8, np.float32, rng)
    by_name = dict(zip(entry.params, params))
    np.testing.assert_array_equal(op(entry)(x, **by_name, eps=1e-4), op(entry)(x, *params, 1e-4))
    last = entry.params[-1]
    np.testing.assert_array_equal(
        op(entry)(x, **{last: by_name[last]}),
        op(entry)(x, *([None] * (len(params) - 1)), by_name[last]),
    )


@ENTRIES
def test_strided_input_and_out(entry):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 12)).astype(np.float32).T  # not C-contiguous
    params = make_params(entry, 16, np.float32, rng)
    strided_params = [np.repeat(p, 2)[::2] for p in params]  # not contiguous either
    want = op(entry)(np.ascontiguousarray(x), *params)
    np.testing.assert_array_equal(op(entry)(x, *strided_params), want)
    out = np.empty_like(want)
    assert op(entry)(x, *params, out=out) is out
    np.testing.assert_array_equal(out, want)
    strided = np.empty((16, 12), np.float32).T
    op(entry)(x, *params, out=strided)
    np.testing.assert_array_equal(strided, want)
    inplace = np.ascontiguousarray(x)
    op(entry)(inplace, *params, out=inplace)
    np.testing.assert_array_equal(inplace, want)


@WITH_PARAMS
def test_a_parameter_inside_out_is_read_as_it_was_at_the_call(entry):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    params = make_params(entry, 8, np.float32, rng)
    want = op(entry)(x, *params)
    out = np.empty_like(x)
    out[0] = params[0]
    got = op(entry)(x, out[0], *params[1:], out=out)
    np.testing.assert_array_equal(got, want)


@ENTRIES
def test_zero_rows_and_empty(entry):
    zeros = op(entry)(np.zeros((3, 4), np.float32))
    # The norms: 0 / sqrt(eps) * 0; the entries along an axis by their formula (1/4 each for a normalising one).
    want = row_reference(entry, np.zeros((3, 4), np.float32), [None] * len(entry.params), 1e-6)
    np.testing.assert_allclose(zeros, want.astype(np.float32), rtol=1e-7, atol=0)
    assert op(entry)(np.zeros((0, 4), np.float32)).shape == (0, 4)
    assert op(entry)(np.zeros((4, 0), np.float32)).shape == (4, 0)


def error_cases(entry):
    f = op(entry)
    x = np.ones((2, 3), np.float32)
    n = entry.name
    yield lambda: f(np.ones((2, 3), np.int32)), TypeError, rf"^{n}: x: expected dtype .*, got int32"
    if not entry.has_dim:  # along an axis, a 0-d array is numpy's (test_a_0d_array_along_its_axis)
        yield lambda: f(np.float32(1.0)), ValueError, rf"^{n}: x: expected an array with at least one"
    yield lambda: f(x, out=np.empty((3, 2), np.float32)), ValueError, rf"^{n}: out: expected shape \(2, 3\)"
    if entry.has_dim:
        yield lambda: f(x, axis="1"), TypeError, rf"^{n}: axis: expected an int, got str"
        yield lambda: f(x, axis=True), TypeError, rf"^{n}: axis: expected an int, got bool"
        yield lambda: f(x, axis=1.0), TypeError, rf"^{n}: axis: expected an int, got float"
        yield (
            lambda: f(x, axis=2),
            ValueError,
            rf"^{n}: axis: expected a dim in \[-2, 2\) for x of 2 dimensions, got 2",
        )
        yield (
            lambda: f(x, -3),
            ValueError,
            rf"^{n}: axis: expected a dim in \[-2, 2\) for x of 2 dimensions, got -3",
        )
        yield (
            lambda: f(np.float32(1.0), 1),
            ValueError,
            rf"^{n}: axis: expected a dim in \[-1, 1\) for x of 0 dimensions, got 1",
        )
    else:
        yield lambda: f(x, eps="1"), TypeError, rf"^{n}: eps: expected a real number, got str"
        yield lambda: f(x, eps=True), TypeError, rf"^{n}: eps: expected a real number, got bool"
    for p in entry.params:
        yield (
            lambda p=p: f(x, **{p: np.ones(4, np.float32)}),
            ValueError,
            rf"^{n}: {p}: expected shape \(3,\) \(x's last dimension\), got \(4,\)",
        )
        yield (
            lambda p=p: f(x, **{p: np.ones(3, np.int32)}),
            TypeError,
            rf"^{n}: {p}: expected dtype .*, got int32",
        )
        yield (
            lambda p=p: f(x, **{p: np.ones((1, 3), np.float32)}),
            ValueError,
            rf"^{n}: {p}: expected shape \(3,\) .*, got \(1, 3\)",
        )


ERRORS = [(e, i) for e in ROW_REDUCTIONS for i in range(len(list(error_cases(e))))]


@pytest.mark.parametrize(("entry", "case"), ERRORS, ids=[f"{e.name}-{i}" for e, i in ERRORS])
def test_errors_name_the_argument(entry, case):
    call, error, pattern = list(error_cases(entry))[case]
    with pytest.raises(error, match=pattern):
        call()


@ENTRIES
def test_numpy_scalars_are_accepted_as_eps(entry):
    x = np.random.default_rng(8).standard_normal((3, 8)).astype(np.float32)
    if entry.has_dim:  # its axis instead
        np.testing.assert_array_equal(op(entry)(x, axis=np.int64(0)), op(entry)(x, axis=0))
        np.testing.assert_array_equal(op(entry)(x, np.int32(-2)), op(entry)(x, 0))
        return
    np.testing.assert_array_equal(op(entry)(x, eps=np.float64(1e-3)), op(entry)(x, eps=1e-3))
    np.testing.assert_array_equal(op(entry)(x, eps=np.int64(1)), op(entry)(x, eps=1.0))


_ALONG = [e for e in ROW_REDUCTIONS if e.has_dim]


@pytest.mark.parametrize("entry", _ALONG, ids=[e.name for e in _ALONG])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_along_any_axis_as_scipy_gives_it(entry, dtype, axis):
    """Any axis (scipy.special's function of the entry's name, for an int axis):
    within an ulp of the formula in extended precision, -inf elements 0
    (log: -inf), an all -inf row NaN; out= of any layout."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((5, 6, 33)) * 3 + 0.5).astype(dtype)
    got = op(entry)(x, axis)
    assert got.dtype == x.dtype and got.shape == x.shape and got.flags.c_contiguous
    moved = np.moveaxis(x, axis, -1)
    want = np.moveaxis(row_reference(entry, moved, [], 0.0), -1, axis)
    assert np.abs(got.astype(np.longdouble) - want).max() <= 2 * np.finfo(dtype).eps * np.abs(want).max()
    out = np.empty(x.shape[::-1], dtype).T  # a Fortran-ordered out
    assert op(entry)(x, axis=axis, out=out) is out
    np.testing.assert_array_equal(out, got)
    inf = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], dtype)
    special = op(entry)(inf, -1)
    assert np.isnan(special[1]).all() and not np.isnan(special[0]).any()
    assert (special[0, 1] == -np.inf) if entry.name.startswith("log") else (special[0, 1] == 0)


@pytest.mark.parametrize("entry", _ALONG, ids=[e.name for e in _ALONG])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_0d_array_along_its_axis(entry, dtype):
    """numpy's reductions take axis -1 or 0 of a 0-d array (so scipy.special's
    functions do): one row of one element, the result 0-d of x's dtype (a
    numpy scalar, as scipy's and a ufunc's), out= a 0-d array, a torch scalar
    the same."""
    for value in (2.5, -np.inf, np.nan):
        x = np.asarray(value, dtype)
        want = row_reference(entry, x.reshape(1), [], 0.0).reshape(())
        for axis in (-1, 0):
            got = op(entry)(x, axis)
            assert np.shape(got) == () and got.dtype == dtype
            np.testing.assert_array_equal(got, want.astype(dtype))
        out = np.empty((), dtype)
        assert op(entry)(x, out=out) is out
        np.testing.assert_array_equal(out, want.astype(dtype))
    torch = pytest.importorskip("torch")
    t = torch.tensor(2.5)
    torch.testing.assert_close(op(entry)(t), getattr(torch, entry.name)(t, -1))


# ---- every producer the pointwise ops take ---------------------------------------


@ENTRIES
def test_torch_in_gives_torch_out_bfloat16_included(entry):
    torch = pytest.importorskip("torch")
    g = np.random.default_rng(3)
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.from_numpy(g.standard_normal((5, 64)).astype(np.float32)) * 3).to(dtype)
        params = [torch.from_numpy(p).to(dtype) for p in make_params(entry, 64, np.float32, g)]
        got = op(entry)(x, *params, last(entry, 1e-6))
        assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == x.shape
        want = torch_ref(torch, entry, x.float(), [p.float() for p in params], 1e-6).to(dtype)
        torch.testing.assert_close(
            got, want, rtol=torch.finfo(dtype).eps * 2, atol=torch.finfo(dtype).eps * 2
        )
        out = torch.empty_like(x)
        version = out._version
        assert op(entry)(x, *params, last(entry, 1e-6), out=out) is out and out._version > version
        assert torch.equal(out, got)


@ENTRIES
def test_torch_rules_apply_and_name_the_argument(entry):
    torch = pytest.importorskip("torch")
    n = entry.name
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(ValueError, match=rf"^{n}: x: expected a tensor that does not require grad"):
        op(entry)(x)
    with torch.no_grad():  # torch computes with it there, so does the bridge
        want = torch_ref(torch, entry, x.detach(), [])
        torch.testing.assert_close(op(entry)(x), want)
    plain = torch.randn(3, 8)
    negated = torch._neg_view(plain)  # a lazily negated view: read by its values
    assert negated.is_neg()
    assert torch.equal(op(entry)(negated), op(entry)(-plain))
    with pytest.raises(ValueError, match=rf"^{n}: x: expected CPU memory, got a tensor on device meta"):
        op(entry)(torch.empty(3, 8, device="meta"))
    for p in entry.params[-1:]:
        with pytest.raises(ValueError, match=rf"^{n}: {p}: expected a tensor that does not require"):
            op(entry)(plain, **{p: torch.ones(8, requires_grad=True)})


@ENTRIES
def test_a_dlpack_only_producer_is_read(entry):
    class Holder:  # __dlpack__ alone, as the array API asks
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)
    got = np.asarray(op(entry)(Holder(x)))
    np.testing.assert_array_equal(got, op(entry)(x))


@ENTRIES
def test_masked_arrays_are_refused_not_their_mask_dropped(entry):
    n = entry.name
    m = np.ma.masked_array([[1.0, 2.0, 1000.0]], mask=[[False, False, True]], dtype=np.float32)
    with pytest.raises(TypeError, match=rf"^{n}: x: expected an array without a mask"):
        op(entry)(m)
    for p in entry.params:
        with pytest.raises(TypeError, match=rf"^{n}: {p}: expected an array without a mask"):
            op(entry)(m.data, **{p: np.ma.masked_array([1.0, 1.0, 1.0], dtype=np.float32)})
    with pytest.raises(TypeError, match=rf"^{n}: out: expected an array without a mask"):
        op(entry)(m.data, out=np.ma.masked_array(np.zeros((1, 3), np.float32)))
    np.testing.assert_array_equal(op(entry)(m.filled(0.0)), op(entry)(np.array([[1, 2, 0]], np.float32)))


@ENTRIES
def test_sequences_and_core_refusals_keep_the_ops_name(entry):
    np.testing.assert_array_equal(op(entry)([[3.0, 4.0]]), op(entry)(np.array([[3.0, 4.0]])))
    np.testing.assert_array_equal(
        op(entry)([[3.0, 4.0]], *([[1.0, 2.0]] * len(entry.params))),
        op(entry)(np.array([[3.0, 4.0]]), *([np.array([1.0, 2.0])] * len(entry.params))),
    )
    x = np.ones((2, 3), np.float32)
    out = np.lib.stride_tricks.as_strided(np.zeros(3, np.float32), (2, 3), (0, 4), writeable=True)
    with pytest.raises(ValueError, match=rf"^{entry.name}: out: has stride 0 in dimension 0"):
        op(entry)(x, out=out)


def test_every_entry_is_a_compiled_function_with_the_tables_signature():
    for entry in ROW_REDUCTIONS:
        doc = op(entry).__doc__
        assert entry.doc in doc, entry.name  # the torch op's words, quoted
        first = doc.splitlines()[0]  # pybind11's signature line
        for p in entry.params:
            assert f"{p}: object = None" in first, first
        if entry.has_dim:
            assert "axis: object = -1" in first, first
        else:
            assert f"eps: object = {entry.eps!r}" in first, first
        assert "*, out: object = None" in first, first
        assert entry.name in tb.__all__
        with pytest.raises(TypeError):  # out is keyword-only
            op(entry)(np.ones((2, 2), np.float32), *([None] * len(entry.params)), last(entry, None), None)
