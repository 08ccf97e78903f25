"""The bridge's norms with casting modes (offset, casting_mode; the op table's
CASTING_MODES), every entry with casting times every mode, for numpy arrays
and torch tensors: against each mode's formula in extended precision and as
numpy computes it, the result dtype, out=, and every argument's error. A new
entry or mode is tested here with no new code."""

import numpy as np
import pytest
import tierkit_bridge as tb
from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS
from tierkit_core.op_testing import dtype_pairs

CASES = [(e, m) for e in ROW_REDUCTIONS if e.casting for m in CASTING_MODES]
CASTING = pytest.mark.parametrize(("entry", "mode"), CASES, ids=[f"{e.name}-{m.name}" for e, m in CASES])
DTYPES = dtype_pairs(
    "float32/float32 float64/float64 float16/float16 float16/float32 float32/float16 float32/float64", np
)


def compute(*dtypes):
    return np.float64 if np.float64 in dtypes else np.float32


def formula(mode, x, w, eps, offset, wide=None):
    """The mode as the models write it, over numpy: in each step's dtype, or all in `wide`."""
    c = wide or compute(x.dtype.type, w.dtype.type)
    xf = x.astype(wide or compute(x.dtype.type))
    xhat = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps)
    if mode.weight_in == "compute":
        w_eff = w.astype(c) + c(offset)
    else:
        w_eff = w + w.dtype.type(offset) if wide is None else w.astype(wide) + offset
    if mode.rounds_normalized:
        rounded = xhat if wide else xhat.astype(x.dtype)
        return (
            (w_eff * rounded)
            if wide
            else (w_eff.astype(np.result_type(w, x)) * rounded.astype(np.result_type(w, x)))
        )
    y = xhat.astype(c) * w_eff.astype(c)
    return y if wide else y.astype(x.dtype)


def offset_of(mode):
    return 1.0 if mode.name == "gemma" else 0.25


@CASTING
@pytest.mark.parametrize(
    ("xd", "wd"), DTYPES, ids=[f"{np.dtype(a)}-x-{np.dtype(b)}-weight" for a, b in DTYPES]
)
def test_casting_modes_match_the_formula(entry, mode, xd, wd):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((9, 160)) * 3 + 0.5).astype(xd)
    w = ((0.0 if mode.name == "gemma" else 1.0) + 0.5 * rng.standard_normal(160)).astype(wd)
    for offset in (offset_of(mode), 0.0):
        got = getattr(tb, entry.name)(x, w, 1e-6, offset=offset, casting_mode=mode.name)
        theirs = formula(mode, x, w, 1e-6, offset)
        assert got.dtype == theirs.dtype, (got.dtype, theirs.dtype)
        exact = formula(mode, x, w, 1e-6, offset, wide=np.longdouble)
        ulp = np.finfo(xd).eps * float(np.abs(exact).max())  # x-hat rounds in x's dtype or wider
        mine = float(np.abs(got.astype(np.longdouble) - exact).max())
        numpys = float(np.abs(theirs.astype(np.longdouble) - exact).max())
        assert mine <= max(numpys, 0.0) + ulp, (mine, numpys)
        if got.dtype == np.float16 or xd == np.float16:
            assert np.mean(got == theirs) >= 0.99
        out = np.empty(x.shape, got.dtype)
        assert getattr(tb, entry.name)(x, w, 1e-6, offset=offset, casting_mode=mode.name, out=out) is out
        np.testing.assert_array_equal(out, got)
    # Without a weight every mode is the plain norm.
    np.testing.assert_array_equal(
        getattr(tb, entry.name)(x, None, 1e-6, casting_mode=mode.name), getattr(tb, entry.name)(x, None, 1e-6)
    )


@CASTING
def test_casting_out_from_the_first_byte_of_the_16bit_x_it_reads(entry, mode):
    """float16 x with a float32 weight into an out= that starts at x's first
    byte, in the same memory: "llama"'s float32 result (wider rows than x's)
    and the other modes' float16 one (exactly x) each read every row as it
    was at the call."""
    rng = np.random.default_rng(5)
    rows, d = 6, 160
    w = (1.0 + 0.5 * rng.standard_normal(d)).astype(np.float32)
    buf = np.empty(rows * d, np.float32)
    x = buf.view(np.float16)[: rows * d].reshape(rows, d)
    x[...] = rng.standard_normal((rows, d)).astype(np.float16)
    want = getattr(tb, entry.name)(x.copy(), w, 1e-6, offset=offset_of(mode), casting_mode=mode.name)
    assert want.dtype == (np.float32 if mode.name == "llama" else np.float16)
    out = buf.view(want.dtype)[: rows * d].reshape(rows, d)
    got = getattr(tb, entry.name)(x, w, 1e-6, offset=offset_of(mode), casting_mode=mode.name, out=out)
    assert got is out
    np.testing.assert_array_equal(out, want)


@CASTING
@pytest.mark.parametrize("d", [96, 4100])
def test_casting_modes_equal_the_torch_ops(entry, mode, d):
    """Each mode's result is tierkit_torch's bit for bit, both its plain call
    and its composite (the plain op then torch's ops: taken where x needs a
    gradient). A 16-bit "llama" with a weight of x's dtype or float32 runs
    here, and in tierkit_torch's plain call, as one pass (core's
    round_normalized rows; with a float32 weight, core's float32 y); rows of
    4100 have a tail after the vectors."""
    torch = pytest.importorskip("torch")
    tierkit_torch = pytest.importorskip("tierkit_torch")
    g = torch.Generator().manual_seed(1)
    for xd, wd in (
        (torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
        (torch.float16, torch.float32),
    ):
        x = (torch.randn(5, d, generator=g) * 2).to(xd)
        w = (torch.randn(d, generator=g) * 0.3 + (0.0 if mode.name == "gemma" else 1.0)).to(wd)
        kw = dict(offset=offset_of(mode), casting_mode=mode.name)
        got = getattr(tb, entry.name)(x, w, 1e-6, **kw)
        assert isinstance(got, torch.Tensor)
        for x_torch in (x, x.clone().requires_grad_()):
            want = getattr(tierkit_torch, entry.name)(x_torch, w, 1e-6, **kw).detach()
            assert got.dtype == want.dtype and torch.equal(got, want), (xd, wd, x_torch.requires_grad)


@CASTING
def test_casting_errors_name_the_argument(entry, mode):
    f = getattr(tb, entry.name)
    x, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    with pytest.raises(
        ValueError,
        match=rf'^{entry.name}: casting_mode: expected "aten", "llama" or "gemma", got \'{mode.name}x\'',
    ):
        f(x, w, casting_mode=mode.name + "x")
    with pytest.raises(TypeError, match=rf"^{entry.name}: casting_mode: expected a str"):
        f(x, w, casting_mode=1)
    with pytest.raises(TypeError, match=rf"^{entry.name}: offset: expected a real number, got str"):
        f(x, w, offset="1", casting_mode=mode.name)
    with pytest.raises(ValueError, match=rf"^{entry.name}: offset: expected 0.0 without a weight"):
        f(x, None, offset=1.0, casting_mode=mode.name)
    with pytest.raises(TypeError, match=rf"^{entry.name}: x: expected dtype"):
        f(x.astype(np.int32), w, casting_mode=mode.name)
    with pytest.raises(TypeError, match=rf"^{entry.name}: weight: expected dtype"):
        f(x, w.astype(np.int64), casting_mode=mode.name)
    with pytest.raises(ValueError, match=rf"^{entry.name}: weight: expected shape \(4,\)"):
        f(x, w[:3], casting_mode=mode.name)
    wrong = np.float16 if mode.rounds_normalized else np.float64
    with pytest.raises(ValueError, match=rf"^{entry.name}: out: expected shape \(2, 4\) and dtype float32"):
        f(x, w, casting_mode=mode.name, out=np.empty((2, 4), wrong))
