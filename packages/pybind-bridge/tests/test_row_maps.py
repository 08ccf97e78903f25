"""The bridge's row maps (the op table's ROW_MAPS: rotary embeddings) for
numpy arrays and torch tensors: against the models' formula in extended
precision and as numpy computes it, both layouts, broadcast tables, partial
width, promotion, out=, and every argument's error. A new entry is tested
here with no new code."""

import numpy as np
import pytest
import tierkit_bridge as tb
from tierkit_core.op_table import ROW_MAPS

MAPS = pytest.mark.parametrize("entry", ROW_MAPS, ids=[e.name for e in ROW_MAPS])


def rotate(v, interleaved):
    if interleaved:
        out = np.empty_like(v)
        out[..., 0::2], out[..., 1::2] = -v[..., 1::2], v[..., 0::2]
        return out
    h = v.shape[-1] // 2
    return np.concatenate((-v[..., h:], v[..., :h]), -1)


def formula(x, cos, sin, interleaved, dtype=None):
    """What the models compute, in `dtype` (default: numpy's promotion, every step rounded)."""
    dtype = dtype or np.result_type(x, cos, sin)
    x, cos, sin = (a.astype(dtype) for a in (x, cos, sin))
    r = cos.shape[-1]
    y = x[..., :r] * cos + rotate(x[..., :r], interleaved) * sin
    return np.concatenate((y, x[..., r:]), -1)


def tables(shape, dtype, rng):
    return (rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype))


SHAPES = [((2, 3, 5, 16), (1, 1, 5, 16)), ((2, 3, 5, 16), (5, 12)), ((4, 8), (4, 8)), ((3, 5, 6), (3, 1, 6))]


@MAPS
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("xs", "ts"), SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
def test_matches_the_formula(entry, xs, ts, dtype, interleaved):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(dtype)
    cos, sin = tables(ts, dtype, rng)
    got = getattr(tb, entry.name)(x, cos, sin, interleaved)
    assert got.dtype == dtype and got.shape == x.shape
    theirs = formula(x, cos, sin, interleaved)
    if dtype != np.float16:
        np.testing.assert_array_equal(got, theirs)  # numpy's roundings, bit for bit
    exact = formula(x, cos, sin, interleaved, np.longdouble)
    ulp = np.finfo(dtype).eps * float(np.abs(exact).max())
    assert float(np.abs(got.astype(np.longdouble) - exact).max()) <= ulp
    # A strided x and out= give the same.
    xt = np.ascontiguousarray(np.swapaxes(x, 0, -2)).swapaxes(0, -2)
    out = np.empty_like(got)
    assert getattr(tb, entry.name)(xt, cos, sin, interleaved, out=out) is out
    np.testing.assert_array_equal(out, got)


@MAPS
def test_promotes_as_numpy_and_takes_torch(entry):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 8)).astype(np.float16)
    cos, sin = tables((3, 8), np.float32, rng)
    got = getattr(tb, entry.name)(x, cos, sin)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, formula(x, cos, sin, False))
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x).bfloat16()
    got_t = getattr(tb, entry.name)(xt, torch.from_numpy(cos).bfloat16(), torch.from_numpy(sin).bfloat16())
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.bfloat16
    tierkit_torch = pytest.importorskip("tierkit_torch")
    want = getattr(tierkit_torch, entry.name)(
        xt, torch.from_numpy(cos).bfloat16(), torch.from_numpy(sin).bfloat16()
    )
    assert torch.equal(got_t, want)


@MAPS
def test_errors_name_the_argument(entry):
    f = getattr(tb, entry.name)
    x, c = np.ones((2, 5, 8), np.float32), np.ones((5, 8), np.float32)
    cases = [
        ((x.astype(np.int64), c, c), TypeError, "x: expected dtype"),
        ((x, c.astype(np.int32), c), TypeError, "cos: expected dtype"),
        ((np.float32(1.0), c, c), ValueError, "x: expected an array with at least one dimension"),
        ((x, c[:, :7], c[:, :7]), ValueError, "cos: expected a width r = cos.shape[-1] that is even"),
        (
            (x, np.ones((5, 10), np.float32), np.ones((5, 10), np.float32)),
            ValueError,
            "at most x.size(-1) (8), got 10",
        ),
        ((x, c, c[:, :6]), ValueError, "sin: expected a last dimension of 8"),
        (
            (x, np.ones((4, 8), np.float32), c),
            ValueError,
            "cos: shape (4, 8) does not broadcast against x[..., :8] of shape (2, 5, 8)",
        ),
    ]
    for args, kind, text in cases:
        with pytest.raises(kind) as info:
            f(*args)
        assert str(info.value).startswith(f"{entry.name}: ") and text in str(info.value), str(info.value)
    with pytest.raises(
        ValueError, match=rf"^{entry.name}: out: expected shape \(2, 5, 8\) and dtype float32"
    ):
        f(x, c, c, out=np.empty((2, 5, 8), np.float64))
