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


MIXED = [
    (np.float16, np.float32),
    (np.float32, np.float64),
    (np.float64, np.float32),
    (np.float16, np.float64),
]


@pytest.mark.parametrize(("xd", "wd"), MIXED, ids=[f"{np.dtype(a)}-x-{np.dtype(b)}-weight" for a, b in MIXED])
def test_a_weight_of_another_dtype_is_computed_in_xs_compute_type(xd, wd):
    # As torch's F.rms_norm: the weight converted to x's compute type (float32
    # for float16 x; float64 where the weight is float64), the result rounded
    # once to x's dtype; out= alike.
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 48)) * 3).astype(xd)
    w = (1 + 0.5 * rng.standard_normal(48)).astype(wd)
    got = tb.rms_norm(x, w, 1e-6)
    assert got.dtype == xd and got.shape == x.shape
    work = np.float64 if np.float64 in (xd, wd) else np.float32
    same = tb.rms_norm(x.astype(work), w.astype(work), 1e-6).astype(xd)  # the same-dtype kernel, then rounded
    np.testing.assert_array_equal(got, same)
    want = reference(x, w.astype(work), 1e-6)
    # Within 2 ulps of the extended-precision value (float64 accumulates in float64, rounding too).
    assert np.abs(got.astype(np.longdouble) - want).max() <= 2 * np.finfo(xd).eps * np.abs(want).max()
    out = np.empty((48, 5), xd).T  # strided out
    assert tb.rms_norm(x, w, 1e-6, out=out) is out
    np.testing.assert_array_equal(out, got)


def test_a_float32_weight_with_torch_bfloat16_is_torchs():
    torch = pytest.importorskip("torch")
    x = (torch.randn(6, 40) * 3).bfloat16()
    w = torch.randn(40)
    got = tb.rms_norm(x, w, 1e-6)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got, torch.nn.functional.rms_norm(x, (40,), w, 1e-6))


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
            lambda: tb.rms_norm(np.ones((2, 3), np.float32), np.ones(3, np.int32)),
            TypeError,
            r"rms_norm: weight: expected dtype .*, got int32",
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


# ---- every producer the pointwise ops take ---------------------------------------


def test_torch_in_gives_torch_out_bfloat16_included():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(5, 64, generator=g) * 3).to(dtype)
        w = (1 + 0.5 * torch.randn(64, generator=g)).to(dtype)
        got = tb.rms_norm(x, w, 1e-6)
        assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == x.shape
        want = torch.nn.functional.rms_norm(x.float(), (64,), w.float(), 1e-6).to(dtype)
        torch.testing.assert_close(got, want, rtol=torch.finfo(dtype).eps * 2, atol=0)
        out = torch.empty_like(x)
        version = out._version
        assert tb.rms_norm(x, w, 1e-6, out=out) is out and out._version > version
        assert torch.equal(out, got)


def test_torch_rules_apply_and_name_the_argument():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(ValueError, match=r"^rms_norm: x: expected a tensor that does not require grad"):
        tb.rms_norm(x)
    with torch.no_grad():  # torch computes with it there, so does the bridge
        torch.testing.assert_close(tb.rms_norm(x), torch.nn.functional.rms_norm(x.detach(), (8,)))
    plain = torch.randn(3, 8)
    negated = torch._neg_view(plain)  # a lazily negated view: read by its values
    assert negated.is_neg()
    assert torch.equal(tb.rms_norm(negated), tb.rms_norm(-plain))
    with pytest.raises(ValueError, match=r"^rms_norm: x: expected CPU memory, got a tensor on device meta"):
        tb.rms_norm(torch.empty(3, 8, device="meta"))


def test_a_dlpack_only_producer_is_read():
    class Holder:  # __dlpack__ alone, as the array API asks
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)
    got = np.asarray(tb.rms_norm(Holder(x)))
    np.testing.assert_array_equal(got, tb.rms_norm(x))


def test_masked_arrays_are_refused_not_their_mask_dropped():
    m = np.ma.masked_array([[1.0, 2.0, 1000.0]], mask=[[False, False, True]], dtype=np.float32)
    with pytest.raises(TypeError, match=r"^rms_norm: x: expected an array without a mask"):
        tb.rms_norm(m)
    with pytest.raises(TypeError, match=r"^rms_norm: weight: expected an array without a mask"):
        tb.rms_norm(m.data, np.ma.masked_array([1.0, 1.0, 1.0], dtype=np.float32))
    np.testing.assert_array_equal(tb.rms_norm(m.filled(0.0)), tb.rms_norm(np.array([[1, 2, 0]], np.float32)))


def test_sequences_and_core_refusals_keep_the_ops_name():
    np.testing.assert_array_equal(tb.rms_norm([[3.0, 4.0]]), tb.rms_norm(np.array([[3.0, 4.0]])))
    x = np.ones((2, 3), np.float32)
    out = np.lib.stride_tricks.as_strided(np.zeros(3, np.float32), (2, 3), (0, 4), writeable=True)
    with pytest.raises(ValueError, match=r"^rms_norm: out: has stride 0 in dimension 0"):
        tb.rms_norm(x, out=out)
