"""Issue 24's bridge rows, each against numpy's (or torch's) result on the same
inputs: values, dtype, shape, strides and type."""

import gc
import itertools

import numpy as np
import pytest
import tierkit_bridge as tb
from numpy_reference import ARITY, BRIDGE, NUMPY, call, tolerance, ulps
from tierkit_core.op_testing import dtype_pairs, evaluate

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

C = 0.25  # the hand-written cases below; the table's cases use its test scalars
# Every binary entry of the op table as the bridge computes it and as numpy
# does, from its entry alone (numpy_reference): a new one is tested here with
# no new test code.
OPS = {op: (lambda a, b, _op=op, **kw: call(_op, a, b, **kw), None) for op, n in ARITY.items() if n == 2}


def numpy_formula(op, a, b):
    """The entry's formula over numpy's own operators: numpy's result type,
    layout, masks and scalar-ness for the same call."""
    return evaluate(BRIDGE[op], [a, b], NUMPY)


def same_as_numpy(got, want, op=None):
    """Type, dtype, shape, strides and values equal (NaN-free inputs; within
    the entry's ulps for a transcendental op)."""
    assert type(got) is type(want), (type(got), type(want))
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if isinstance(want, np.ndarray):
        assert got.strides == want.strides, (got.strides, want.strides)
    assert_values(got, want, op)


def assert_values(got, want, op=None, computed_in=None):
    """`computed_in`: the dtype the op computed in, where `want` was cast to another after."""
    if op is None or ulps(op) == 0 or np.dtype(want.dtype).kind not in "fc":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **tolerance(op, computed_in or want.dtype))


def numpy_result(op, a, b):
    """numpy's own result; the bridge computes float16 in float32 rounded
    once (numpy rounds each step): the inputs go in the compute type, K order."""
    dtype = np.result_type(a, b)
    work = np.float32 if dtype == np.float16 else dtype
    cast = [x.astype(work) if isinstance(x, np.ndarray) else np.asarray(x).astype(work)[()] for x in (a, b)]
    like = np.multiply(a, b)  # numpy's type, layout and scalar-ness for the pair
    value = numpy_formula(op, *cast)
    if not isinstance(like, np.ndarray):
        return dtype.type(value)
    result = np.empty_like(like, dtype=dtype)
    np.copyto(result, value, casting="unsafe")
    return result


BROADCASTS = [
    ((3, 1), (1, 4)),
    ((), (5,)),
    ((4,), (2, 3, 4)),
    ((2, 1, 3), (4, 1)),
    ((1,), (0, 3)),
    ((7, 1), (7, 6)),
]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(("sa", "sb"), BROADCASTS, ids=[f"{a}x{b}" for a, b in BROADCASTS])
def test_broadcasting_every_operand(op, sa, sb, rng):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    same_as_numpy(OPS[op][0](a, b), numpy_result(op, a, b), op)
    same_as_numpy(OPS[op][0](b, a), numpy_result(op, b, a), op)


def test_broadcast_into_out(rng):
    a = rng.standard_normal(4)
    out = np.empty((3, 4))
    assert tb.add(a, 1.5, out=out) is out
    np.testing.assert_array_equal(out, np.add(a, 1.5, out=np.empty((3, 4))))
    x = rng.standard_normal((3, 4))
    want = x + a
    tb.add(x, a, out=x)  # in place with a broadcast operand that does not overlap out
    np.testing.assert_array_equal(x, want)


DTYPE_PAIRS = dtype_pairs(
    "float32/float64 float16/float32 float16/float64 int32/float32 int8/float16 int16/float16 int64/float32"
    " uint8/float32 bool_/float32 float32/int64",
    np,
)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(
    ("da", "db"), DTYPE_PAIRS, ids=[f"{np.dtype(a)}+{np.dtype(b)}" for a, b in DTYPE_PAIRS]
)
def test_promotion_is_np_result_type(op, da, db, rng):
    a = (rng.standard_normal((2, 3)) * 5).astype(da)
    b = (rng.standard_normal((2, 3)) * 5).astype(db)
    got = OPS[op][0](a, b)
    assert got.dtype == np.result_type(a, b)
    same_as_numpy(got, numpy_result(op, a, b), op)


SCALARS = [2.5, 3, True, np.float64(2.5), np.float32(0.5), np.float16(1.5), np.int64(3), np.int8(-2)]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("scalar", SCALARS, ids=[repr(s) for s in SCALARS])
def test_python_and_numpy_scalars_as_operands(op, dtype, scalar, rng):
    a = rng.standard_normal((3, 2)).astype(dtype)
    # Python scalars are weak (the array's dtype wins), numpy scalars strong (NEP 50).
    same_as_numpy(OPS[op][0](a, scalar), numpy_result(op, a, scalar), op)
    same_as_numpy(OPS[op][0](scalar, a), numpy_result(op, scalar, a), op)


def test_scalars_only_give_a_numpy_scalar():
    same_as_numpy(tb.add(2.0, 3), np.add(2.0, 3))
    same_as_numpy(tb.mul(np.float32(2), 1.5), np.multiply(np.float32(2), 1.5))
    same_as_numpy(tb.scale_shift(2.0, 1.5, 0.5), np.float64(3.5))
    same_as_numpy(tb.add(np.array(1.0, np.float32), np.array(2.0, np.float32)), np.float32(3))


def _layouts(rng):
    base = rng.standard_normal((6, 5, 4))
    yield "C", base
    yield "F", np.asfortranarray(base)
    yield "transposed", base.transpose(2, 0, 1)
    yield "reversed", base[::-1, :, ::-1]
    yield "strided", base[::2, 1:, ::3]
    yield "F-strided", np.asfortranarray(base)[:, ::2]
    yield "size-1 dims", base[:1, :, :1].transpose(2, 1, 0)
    yield "empty", np.asfortranarray(np.zeros((0, 3, 2)))


@pytest.mark.parametrize("op", list(OPS))
def test_result_layout_is_numpys_k_order(op, rng):
    layouts = dict(_layouts(rng))
    for (na, a), (nb, b) in itertools.product(layouts.items(), repeat=2):
        if a.shape != b.shape:
            continue
        got, want = OPS[op][0](a, b), numpy_result(op, a, b)
        assert got.strides == want.strides, (na, nb, got.strides, want.strides)
        assert_values(got, want, op)
    f = np.asfortranarray(rng.standard_normal((3, 4)).astype(np.float32))
    same_as_numpy(tb.scale_shift(f, 2.0, 1.0), (2.0 * f + 1.0).astype(np.float32))
    # broadcast and promoted operands too
    same_as_numpy(
        OPS[op][0](f, f[:, :1].astype(np.float64)), numpy_result(op, f, f[:, :1].astype(np.float64)), op
    )


@pytest.mark.parametrize("op", list(OPS))
def test_out_of_another_dtype_is_cast_like_numpy(op, rng):
    a = rng.standard_normal(7).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    for out_dtype in (np.float64, np.float16, np.complex128):
        out, want = np.empty(7, out_dtype), np.empty(7, out_dtype)
        assert OPS[op][0](a, b, out=out) is out
        np.copyto(want, numpy_result(op, a, b), casting="same_kind")  # a ufunc's out= casts so
        assert_values(out, want, op, computed_in=np.float32)


@pytest.mark.parametrize("op", list(OPS))
def test_masked_arrays_keep_their_mask(op, rng):
    a = np.ma.array(rng.standard_normal((2, 3)), mask=[[0, 1, 0], [0, 0, 0]])
    b = np.ma.array(rng.standard_normal(3), mask=[0, 0, 1])
    plain = rng.standard_normal((2, 3))
    for x, y in [(a, b), (a, plain), (plain, b), (b, 2.0)]:
        got = OPS[op][0](x, y)
        want = numpy_formula(op, x, y)
        assert isinstance(got, np.ma.MaskedArray)
        np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))
        assert_values(got.filled(0), want.filled(0), op)
        assert got.dtype == want.dtype and got.shape == want.shape
    got = tb.scale_shift(a, 2.0, 1.0)
    assert isinstance(got, np.ma.MaskedArray) and got.mask.tolist() == a.mask.tolist()
    np.testing.assert_array_equal(got.filled(0), (2.0 * a + 1.0).filled(0))


def test_interleaved_out_shares_no_element_and_is_computed():
    base = np.arange(20, dtype=np.float32)
    a = base[1::2].copy()
    tb.add(base[1::2], base[1::2], out=base[::2])
    np.testing.assert_array_equal(base[::2], a + a)
    np.testing.assert_array_equal(base[1::2], a)  # the inputs untouched
    m = np.arange(24.0).reshape(4, 6)  # column blocks of one matrix
    right = m[:, 3:].copy()
    tb.scale_shift(m[:, 3:], 2.0, 1.0, out=m[:, :3])
    np.testing.assert_array_equal(m[:, :3], 2.0 * right + 1.0)
    np.testing.assert_array_equal(m[:, 3:], right)


@pytest.mark.parametrize(
    "make",
    [
        lambda b: (b[:-1], b[1:]),  # shifted by one
        lambda b: (b[::-1], b),  # reversed onto itself
        lambda b: (b[:16].reshape(4, 4).T, b[:16].reshape(4, 4)),  # a transpose onto itself
        lambda b: (b[2::3][:5], b[::2][:5]),  # strides 3 and 2: share 8
    ],
    ids=["shifted", "reversed", "transposed-alias", "strides 3 and 2"],
)
def test_partial_overlap_is_refused_with_memory_untouched(make):
    base = np.arange(20, dtype=np.float64)
    x, out = make(base)
    if not np.shares_memory(x, out):  # the case must really share an element
        pytest.skip("no shared element")
    before = base.copy()
    with pytest.raises(ValueError, match="out: overlaps input 'x' without being the same elements"):
        tb.scale_shift(x, 2.0, 1.0, out=out)
    np.testing.assert_array_equal(base, before)


def test_exact_in_place_still_allowed(rng):
    x = rng.standard_normal((5, 4))[:, ::2]
    want = x * x
    assert tb.mul(x, x, out=x) is x
    np.testing.assert_array_equal(x, want)


def test_refusals_are_collected_cleanly():
    for _ in range(3):
        try:
            tb.add(np.zeros(3, np.complex64), 1.0)
        except TypeError as e:
            kept = e  # kept alive, as pytest does
    assert "got complex64" in str(kept)
    gc.collect()


@needs_torch
def test_torch_requires_grad_is_computed_under_no_grad():
    w = torch.arange(4.0, requires_grad=True)
    with torch.no_grad():
        got = tb.add(w, w)
        assert torch.equal(got, w + w) and got.dtype == w.dtype and not got.requires_grad
        version = w._version
        assert tb.scale_shift(w, 0.5, 1.0, out=w) is w  # an optimizer-style step
        assert w._version > version
    assert w.detach().tolist() == [1.0, 1.5, 2.0, 2.5]
    with pytest.raises(ValueError, match="a: expected a tensor that does not require grad.*torch.no_grad"):
        tb.add(w, w)


@needs_torch
def test_torch_inference_tensor_as_out_outside_inference_mode_is_refused():
    with torch.inference_mode():
        t = torch.zeros(3)
        assert tb.add(torch.ones(3), torch.ones(3), out=t) is t  # inside it: written, as torch does
    assert t.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="out: Inplace update to inference tensor outside InferenceMode"):
        tb.add(torch.ones(3), torch.ones(3), out=t)
    assert t.tolist() == [2.0, 2.0, 2.0]  # refused before writing
    assert tb.add(t, t).tolist() == [4.0, 4.0, 4.0]  # reading one is fine, as in torch
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        t.add_(1)  # what torch says


@needs_torch
def test_torch_broadcasting_and_promotion_follow_torch():
    a = torch.randn(3, 1, dtype=torch.bfloat16)
    b = torch.randn(1, 4)
    got = tb.add(a, b)
    want = a.float() + b
    assert got.dtype == torch.result_type(a, b) == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got = tb.mul(torch.arange(3.0, dtype=torch.float16), 2.5)
    assert got.dtype == torch.float16 and got.tolist() == [0.0, 2.5, 5.0]
    out = torch.empty(3, 4, dtype=torch.float64)
    assert tb.add(a, b, out=out) is out
    torch.testing.assert_close(out, want.double(), rtol=0, atol=0)
