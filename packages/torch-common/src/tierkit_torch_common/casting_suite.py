"""The norms' casting modes' test suite (``offset`` and ``casting_mode``, the
op table's ``CASTING_MODES``), every entry with ``casting`` times every mode,
in one torch namespace: each torch tier's ``tests/test_casting.py`` imports
these tests and gives them its namespace (the ``ops`` fixture), as the row
suite does; the guard test checks every entry and mode has its cases.

The reference is each mode's formula as the models write it, in torch
(``FORMULAS``: aten's ``F.rms_norm`` with ``weight + offset``, Hugging Face's
Llama and Gemma norms), and that formula in float64: values at least as close
to float64 as the formula computed by torch, per dtype and for mixed dtypes,
and equal to it in at least 99% of elements in 16-bit dtypes; gradients the
same; the output dtype the formula's; errors, real and fake alike; both
autograd modes; vmap; compile; the fused residual forms; autocast.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS, RowReduction
from tierkit_core.op_testing import dtype_pairs

from .row_suite import err, make, reference

__all__ = [
    "CASTING",
    "FORMULAS",
    "test_casting_errors_name_the_argument",
    "test_casting_fused_add_is_the_add_then_the_norm",
    "test_casting_gradcheck_and_forward_ad",
    "test_casting_gradients_as_accurate_as_the_formula",
    "test_casting_in_place_reads_a_weight_inside_residual",
    "test_casting_matches_the_formula",
    "test_casting_under_autocast_as_the_formula",
    "test_casting_untracked_calls_give_the_tracked_calls_bits",
    "test_casting_vmap_and_compile",
]

_ENTRIES = [e for e in ROW_REDUCTIONS if e.casting]
_CASES = [(e, m.name) for e in _ENTRIES for m in CASTING_MODES]
CASTING = pytest.mark.parametrize(("entry", "mode"), _CASES, ids=[f"{e.name}-{m}" for e, m in _CASES])

DTYPES = dtype_pairs(
    "float32/float32 float64/float64 float16/float16 bfloat16/bfloat16 bfloat16/float32 float16/bfloat16"
    " float32/bfloat16",
    torch,
)
_DTYPE_IDS = [f"{str(a)[6:]}-x-{str(b)[6:]}-weight" for a, b in DTYPES]


def _rstd(x: Any, eps: float) -> Any:
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _aten(x: Any, w: Any, eps: float, offset: float) -> Any:
    return F.rms_norm(x, (x.shape[-1],), None if w is None else w + offset, eps)


def _llama(x: Any, w: Any, eps: float, offset: float) -> Any:
    xf = x.float() if x.dtype != torch.float64 else x
    y = (xf * _rstd(xf, eps)).to(x.dtype)
    return y if w is None else (w + offset) * y


def _gemma(x: Any, w: Any, eps: float, offset: float) -> Any:
    xf = x.float() if x.dtype != torch.float64 else x
    y = xf * _rstd(xf, eps)
    if w is not None:
        y = y * (offset + (w.double() if torch.float64 in (x.dtype, w.dtype) else w.float()))
    return y.to(x.dtype)


# Each mode as the models (and aten) write it, in torch; float64 inputs give its float64 reference.
FORMULAS = {"aten": _aten, "llama": _llama, "gemma": _gemma}


def weight(d: int, dtype: Any, gen: Any, mode: str) -> Any:
    """Non-trivial: near 1 for the plain modes; near 0 for Gemma's (it adds the offset, 1)."""
    centre = 0.0 if mode == "gemma" else 1.0
    return (centre + make((d,), torch.float64, gen, 0.5)).to(dtype)


def offset_of(mode: str) -> float:
    return 1.0 if mode == "gemma" else 0.25


def call(ops: Any, entry: RowReduction, *args: Any, **kw: Any) -> Any:
    return getattr(ops, entry.name)(*args, **kw)


@CASTING
@pytest.mark.parametrize(("xd", "wd"), DTYPES, ids=_DTYPE_IDS)
@pytest.mark.parametrize("shape", [(16, 64), (3, 5, 256), (4, 4097)], ids=str)
def test_casting_matches_the_formula(ops, entry, mode, xd, wd, shape, gen):
    formula = FORMULAS[mode]
    x = make(shape, xd, gen) + 0.5
    for w, offset in (
        (weight(shape[-1], wd, gen, mode), offset_of(mode)),
        (weight(shape[-1], wd, gen, mode), 0.0),
    ):
        ours = call(ops, entry, x, w, 1e-6, offset=offset, casting_mode=mode)
        theirs = formula(x, w, 1e-6, offset)
        ref = formula(x.double(), w.double(), 1e-6, offset)
        if xd == torch.float64 and wd == torch.float64:  # float64 itself: extended precision
            ref = reference(entry, x, [w + offset if mode != "gemma" else w.double() + offset], 1e-6)
        assert ours.dtype == theirs.dtype and ours.shape == x.shape, (ours.dtype, theirs.dtype)
        ulp = torch.finfo(ours.dtype).eps * ref.abs().max().item()
        assert err(ours, ref) <= err(theirs, ref) + ulp, (err(ours, ref), err(theirs, ref))
        if ours.dtype in (torch.float16, torch.bfloat16) or xd in (torch.float16, torch.bfloat16):
            same = (ours == theirs).float().mean().item()
            assert same >= 0.99, f"{mode}: equal to the formula in {same:.4f} of elements"
    # Without a weight every mode is the plain norm.
    torch.testing.assert_close(
        call(ops, entry, x, None, 1e-6, casting_mode=mode), call(ops, entry, x, None, 1e-6), rtol=0, atol=0
    )


@CASTING
@pytest.mark.parametrize(("xd", "wd"), DTYPES, ids=_DTYPE_IDS)
def test_casting_gradients_as_accurate_as_the_formula(ops, entry, mode, xd, wd, gen):
    formula, offset = FORMULAS[mode], offset_of(mode)
    x = (make((8, 64), xd, gen) + 0.5).requires_grad_()
    w = weight(64, wd, gen, mode).requires_grad_()
    y = call(ops, entry, x, w, 1e-6, offset=offset, casting_mode=mode)
    g = make(y.shape, y.dtype, gen, 1.0)
    ours = torch.autograd.grad(y, (x, w), g)
    theirs = torch.autograd.grad(formula(x, w, 1e-6, offset), (x, w), g)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = torch.autograd.grad(formula(x64, w64, 1e-6, offset), (x64, w64), g.double())
    for o, a, r in zip(ours, theirs, ref):
        assert o.dtype == a.dtype
        slack = 2 * torch.finfo(o.dtype).eps * r.abs().max().item()
        assert err(o, r) <= err(a, r) + slack, (err(o, r), err(a, r))


@CASTING
def test_casting_gradcheck_and_forward_ad(ops, entry, mode, gen):
    x = make((3, 7), torch.float64, gen).requires_grad_()
    w = weight(7, torch.float64, gen, mode).requires_grad_()

    def fn(a, b):
        return call(ops, entry, a, b, 1e-5, offset=offset_of(mode), casting_mode=mode)

    assert torch.autograd.gradcheck(fn, (x, w), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, (x, w))


@CASTING
def test_casting_vmap_and_compile(ops, entry, mode, gen):
    offset = offset_of(mode)
    x = make((4, 6, 32), torch.bfloat16, gen)
    w = weight(32, torch.float32, gen, mode)
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        ws = make((4, 32), torch.float32, gen, 0.5)
        got = torch.vmap(lambda a, b: call(ops, entry, a, b, 1e-6, offset=offset, casting_mode=mode))(x, ws)
        want = torch.vmap(lambda a, b: FORMULAS[mode](a, b, 1e-6, offset))(x, ws)
        torch.testing.assert_close(got, want)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    xg = x.float().requires_grad_()
    wg = w.clone().requires_grad_()

    def fn(a, b):
        return call(ops, entry, a, b, 1e-6, offset=offset, casting_mode=mode) * 2

    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    y, eager = compiled(xg, wg), fn(xg, wg)
    torch.testing.assert_close(y, eager)
    torch.testing.assert_close(
        torch.autograd.grad(y.sum(), (xg, wg)), torch.autograd.grad(eager.sum(), (xg, wg))
    )
    x2 = make((10, 32), torch.float32, gen)
    torch.testing.assert_close(compiled(x2, wg), fn(x2, wg))


@CASTING
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_casting_in_place_reads_a_weight_inside_residual(ops, entry, mode, dtype, gen):
    """add_(x, r, r[0]): the weight is read as called, before h overwrites it,
    in every mode (llama's product after the call read h before: y off by 8)."""
    if not entry.fused_add:
        pytest.skip(f"{entry.name} has no fused residual form")
    x, r = make((4, 32), dtype, gen), make((4, 32), dtype, gen) + 1.0
    # Without an offset the weight the product reads is residual's row itself.
    for row, offset in ((0, 0.0), (2, 0.0), (0, offset_of(mode))):
        want_y, want_h = getattr(ops, entry.add_name)(
            x, r, r[row].clone(), 1e-6, offset=offset, casting_mode=mode
        )
        r2 = r.clone()
        y = getattr(ops, entry.add_name + "_")(x, r2, r2[row], 1e-6, offset=offset, casting_mode=mode)
        torch.testing.assert_close(r2, want_h, rtol=0, atol=0)
        torch.testing.assert_close(y, want_y, rtol=0, atol=0)


@CASTING
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("wd", [None, torch.float32], ids=["w-like-x", "w-float32"])
def test_casting_untracked_calls_give_the_tracked_calls_bits(ops, entry, mode, dtype, wd, gen):
    """A call that records nothing for autograd may take a faster path (on
    the CPU, "llama" in 16 bits is one pass, with a weight of x's dtype or
    float32): it gives the bits and dtype of the call that records a
    gradient, in every form and under inference_mode; the in-place form
    still counts as a write to residual (its version); a tangent (forward
    AD) is still computed."""
    import torch.autograd.forward_ad as fwAD

    offset = offset_of(mode)
    x, r = make((5, 4100), dtype, gen), make((5, 4100), dtype, gen)
    w = weight(4100, wd or dtype, gen, mode)
    tracked = call(ops, entry, x.clone().requires_grad_(), w, 1e-6, offset=offset, casting_mode=mode).detach()
    with torch.no_grad():
        untracked = call(ops, entry, x, w, 1e-6, offset=offset, casting_mode=mode)
        assert untracked.dtype == tracked.dtype and torch.equal(untracked, tracked)
    with torch.inference_mode():
        assert torch.equal(call(ops, entry, x, w, 1e-6, offset=offset, casting_mode=mode), tracked)
    if entry.fused_add:
        y_t, h_t = getattr(ops, entry.add_name)(
            x.clone().requires_grad_(), r, w, 1e-6, offset=offset, casting_mode=mode
        )
        with torch.no_grad():
            y, h = getattr(ops, entry.add_name)(x, r, w, 1e-6, offset=offset, casting_mode=mode)
            assert torch.equal(y, y_t.detach()) and torch.equal(h, h_t.detach())
            r2 = r.clone()
            version = r2._version
            y2 = getattr(ops, entry.add_name + "_")(x, r2, w, 1e-6, offset=offset, casting_mode=mode)
            assert torch.equal(y2, y) and torch.equal(r2, h) and r2._version > version
            strided = torch.empty(4100, 5, dtype=dtype).t()
            strided.copy_(r)
            y3 = getattr(ops, entry.add_name + "_")(x, strided, w, 1e-6, offset=offset, casting_mode=mode)
            assert torch.equal(strided, h) and y3.dtype == y.dtype and torch.equal(y3, y)
    # A tangent in x: the composite (and its forward AD) still runs.
    tangent = make((5, 4100), dtype, gen, 1.0)
    with torch.no_grad(), fwAD.dual_level():
        out = call(ops, entry, fwAD.make_dual(x, tangent), w, 1e-6, offset=offset, casting_mode=mode)
        primal, jvp = fwAD.unpack_dual(out)
    assert torch.equal(primal, tracked) and jvp is not None and jvp.shape == x.shape


@CASTING
def test_casting_fused_add_is_the_add_then_the_norm(ops, entry, mode, gen):
    if not entry.fused_add:
        pytest.skip(f"{entry.name} has no fused residual form")
    offset = offset_of(mode)
    for xd, wd in (
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
    ):
        x, r = make((6, 64), xd, gen), make((6, 64), xd, gen)
        w = weight(64, wd, gen, mode)
        h = x + r
        want = call(ops, entry, h, w, 1e-6, offset=offset, casting_mode=mode)
        y, h2 = getattr(ops, entry.add_name)(x, r, w, 1e-6, offset=offset, casting_mode=mode)
        torch.testing.assert_close(h2, h, rtol=0, atol=0)
        torch.testing.assert_close(y, want, rtol=0, atol=0)
        r2 = r.clone()
        y2 = getattr(ops, entry.add_name + "_")(x, r2, w, 1e-6, offset=offset, casting_mode=mode)
        torch.testing.assert_close(r2, h, rtol=0, atol=0)
        torch.testing.assert_close(y2, want, rtol=0, atol=0)
    # Differentiated: the add's and the norm's gradients, as the unfused pair's.
    x, r = (make((3, 16), torch.float64, gen).requires_grad_() for _ in range(2))
    w = weight(16, torch.float64, gen, mode).requires_grad_()
    y, h = getattr(ops, entry.add_name)(x, r, w, 1e-6, offset=offset, casting_mode=mode)
    got = torch.autograd.grad((y * 3 + h).sum(), (x, r, w))
    hh = x + r
    want = torch.autograd.grad((FORMULAS[mode](hh, w, 1e-6, offset) * 3 + hh).sum(), (x, r, w))
    torch.testing.assert_close(got, want)


@CASTING
def test_casting_under_autocast_as_the_formula(ops, entry, mode, gen):
    """float32 weights, activations from a bfloat16 matmul: the mixed-precision block under autocast."""
    a = make((8, 32), torch.float32, gen)
    proj = make((32, 32), torch.float32, gen, 0.2)
    w = weight(32, torch.float32, gen, mode)
    offset = offset_of(mode)
    with torch.autocast("cpu", torch.bfloat16):
        x = a @ proj
        ours = call(ops, entry, x, w, 1e-6, offset=offset, casting_mode=mode)
        theirs = FORMULAS[mode](x, w, 1e-6, offset)
    assert x.dtype == torch.bfloat16 and ours.dtype == theirs.dtype
    assert (ours == theirs).float().mean().item() >= 0.99


def _error_cases(entry: RowReduction, mode: str, device: str) -> list[tuple[Any, Any, str]]:
    x = torch.ones(2, 4, device=device)
    w = torch.ones(4, device=device)
    return [
        (
            lambda o: call(o, entry, x, w, casting_mode="llama2"),
            RuntimeError,
            'casting_mode: expected "aten"',
        ),
        (
            lambda o: call(o, entry, x, None, offset=1.0, casting_mode=mode),
            RuntimeError,
            "offset: expected 0.0",
        ),
        (lambda o: call(o, entry, x.long(), w, casting_mode=mode), RuntimeError, "x: expected dtype"),
        (lambda o: call(o, entry, x, w.int(), casting_mode=mode), RuntimeError, "weight: expected dtype"),
        (lambda o: call(o, entry, x, w[:3], casting_mode=mode), RuntimeError, "weight: expected shape [4]"),
        (lambda o: call(o, entry, x, w, offset="1", casting_mode=mode), (RuntimeError, TypeError), "offset"),
    ]


@CASTING
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_casting_errors_name_the_argument(ops, entry, mode, device):
    for fn, kind, text in _error_cases(entry, mode, device):
        with pytest.raises(kind, match=text.replace("[", r"\[")):
            fn(ops)
    if entry.fused_add:
        x = torch.ones(2, 4)
        with pytest.raises(RuntimeError, match="residual: expected shape"):
            getattr(ops, entry.add_name)(x, torch.ones(2, 3), torch.ones(4), casting_mode=mode)
        with pytest.raises(RuntimeError, match='casting_mode: expected "aten"'):
            getattr(ops, entry.add_name + "_")(x, x.clone(), torch.ones(4), casting_mode="Gemma")
