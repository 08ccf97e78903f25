"""gelu_tanh_mul against eager `F.gelu(a, approximate="tanh") * b`: accuracy
against an extended-precision value (no worse than eager's plus one ulp, per
dtype) and special values as eager's. Values, layouts, gradients, opcheck,
compile and every other tier come from its op table entry (the table-driven
suites)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ops = torch.ops.tierkit


def exact(a: torch.Tensor) -> np.ndarray:
    """gelu_tanh(a) in extended precision (numpy's longdouble), as a * sigmoid(2u)."""
    al = a.double().numpy().astype(np.longdouble)
    z = (
        np.longdouble(2)
        * np.sqrt(np.longdouble(2) / np.longdouble(np.pi))
        * (al + np.longdouble(0.044715) * al**3)
    )
    with np.errstate(over="ignore"):
        return al / (1 + np.exp(-z))


def ulps(y: torch.Tensor, ref: np.ndarray, dtype: torch.dtype) -> float:
    """The largest error in ulps of the dtype, over the results that are not
    near underflow (|exact| >= tiny / eps: there even a correctly rounded
    result loses relative digits, and both eager and tierkit give 0 where
    exp(-z) overflows, as silu_mul does below -88.7)."""
    info = torch.finfo(dtype)
    keep = np.abs(ref) >= info.tiny / info.eps
    err = np.abs(y.double().numpy().astype(np.longdouble) - ref)[keep]
    return float((err / np.abs(ref[keep])).max() / info.eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_no_less_accurate_than_eager_plus_one_ulp(dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(1 << 16, generator=g, dtype=torch.float64) * 4).to(dtype)
    ones = torch.ones_like(a)
    ref = exact(a)
    ours = ulps(ops.gelu_tanh_mul(a, ones), ref, dtype)
    eager = ulps(F.gelu(a, approximate="tanh") * ones, ref, dtype)
    assert ours <= eager + 1, (ours, eager)
    # Where eager has no cancellation (a > -3) the bound is tight: eager is accurate there.
    keep = a > -3
    ours_near = ulps(ops.gelu_tanh_mul(a[keep], ones[keep]), ref[keep.numpy()], dtype)
    eager_near = ulps((F.gelu(a, approximate="tanh") * ones)[keep], ref[keep.numpy()], dtype)
    assert ours_near <= eager_near + 1, (ours_near, eager_near)
    # And close to eager itself where eager is accurate (a > -3: no cancellation).
    keep = a > -3
    torch.testing.assert_close(ops.gelu_tanh_mul(a, ones)[keep], F.gelu(a, approximate="tanh")[keep])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_special_values_as_eager(dtype):
    a = torch.tensor(
        [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 100.0, -100.0, 3e4, -3e4], dtype=dtype
    )
    for b in (torch.ones_like(a), torch.full_like(a, float("inf")), torch.full_like(a, -2.0)):
        got, want = ops.gelu_tanh_mul(a, b), F.gelu(a, approximate="tanh") * b
        assert torch.equal(got.isnan(), want.isnan()), (a, b, got, want)
        finite = ~want.isnan()
        assert torch.equal(got[finite], want[finite]), (a, b, got, want)
        assert torch.equal(torch.signbit(got[finite]), torch.signbit(want[finite]))  # -0 stays -0
