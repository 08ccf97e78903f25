"""tierkit_bridge.rms_norm for numpy arrays: against an extended-precision
reference and torch's F.rms_norm, every argument's error, out=."""

import numpy as np
import pytest
import tierkit_bridge as tb


def reference(x, weight=None, eps=None):
    eps = eps if eps is not None else np.finfo(np.float64 if x.dtype == np.float64 else np.float32).eps
    xl = x.astype(np.longdouble)
    y = xl / np.sqrt((xl * xl).mean(-1, keepdims=True) + np.longdouble(eps))
    return y * weight.astype(np.longdouble) if weight is not None else y


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 64), (7, 1), (5,)])
def test_matches_extended_precision(dtype, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    w = (1 + 0.5 * rng.standard_normal(shape[-1])).astype(dtype)
    for weight in (None, w):
        got = tb.rms_norm(x, weight, 1e-6)
        assert got.dtype == x.dtype and got.shape == x.shape
        want = reference(x, weight, 1e-6)
        # Rounded once from float (double) accumulation: within an ulp of the exact result.
        ulp = np.finfo(dtype).eps * np.abs(want).max()
        assert np.abs(got.astype(np.longdouble) - want).max() <= ulp


def test_agrees_with_torch_and_its_default_eps():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((6, 40)).astype(np.float32) * 1e-3
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), (40,)).numpy()
    np.testing.assert_allclose(tb.rms_norm(x), want, rtol=4e-7, atol=0)  # 2 ulp: both round once


def test_strided_input_and_out():
    x = np.random.default_rng(2).standard_normal((16, 12)).astype(np.float32).T  # not C-contiguous
    want = tb.rms_norm(np.ascontiguousarray(x))
    np.testing.assert_array_equal(tb.rms_norm(x), want)
    out = np.empty_like(want)
    assert tb.rms_norm(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    strided = np.empty((16, 12), np.float32).T
    tb.rms_norm(x, out=strided)
    np.testing.assert_array_equal(strided, want)
    inplace = np.ascontiguousarray(x)
    tb.rms_norm(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, want)


def test_zero_rows_and_empty():
    np.testing.assert_array_equal(tb.rms_norm(np.zeros((3, 4), np.float32)), np.zeros((3, 4), np.float32))
    assert tb.rms_norm(np.zeros((0, 4), np.float32)).shape == (0, 4)


@pytest.mark.parametrize(
    "call,error,pattern",
    [
        (
            lambda: tb.rms_norm(np.ones((2, 3), np.int32)),
            TypeError,
            r"rms_norm: x: expected dtype .*, got int32",
        ),
        (
            lambda: tb.rms_norm(np.float32(1.0)),
            ValueError,
            r"rms_norm: x: expected an array with at least one",
        ),
        (
            lambda: tb.rms_norm(np.ones((2, 3), np.float32), np.ones(4, np.float32)),
            ValueError,
            r"rms_norm: weight: expected shape \(3,\) \(x's last dimension\), got \(4,\)",
        ),
        (
            lambda: tb.rms_norm(np.ones((2, 3), np.float32), np.ones(3, np.float64)),
            TypeError,
            r"rms_norm: weight: expected dtype float32 \(same as x\), got float64",
        ),
        (
            lambda: tb.rms_norm(np.ones((2, 3), np.float32), out=np.empty((3, 2), np.float32)),
            ValueError,
            r"rms_norm: out: expected shape \(2, 3\) and dtype float32",
        ),
        (
            lambda: tb.rms_norm(np.ones((2, 3), np.float32), eps="1"),
            TypeError,
            r"rms_norm: eps: expected a real",
        ),
    ],
)
def test_errors_name_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
