"""The row reductions' edges that once gave a wrong number or a missing error,
in every tier that has them (tierkit:: of torch-cpu, tierkit_stable:: of
torch-stable, the bridge): a weight that lies in the tensor being written,
derivatives the building blocks would cut, inference tensors written in
place, inference tensors differentiated against a weight, interleaved views.
Each case against aten (or numpy) on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
import tierkit_bridge as tb
import tierkit_torch  # noqa: F401  (registers tierkit::)
import tierkit_torch_stable  # noqa: F401  (registers tierkit_stable::)
import torch
import torch.nn.functional as F

NAMESPACES = ["tierkit", "tierkit_stable"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def ops(ns):
    return getattr(torch.ops, ns)


def make(shape, dtype, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ---- 1. a weight inside the tensor being written --------------------------------


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("row", [0, 31, 63])
def test_add_rms_norm_in_place_with_the_weight_a_row_of_residual(ns, dtype, row):
    # 64 rows of 256: several threads' chunks, so later rows (and the other
    # thread) would read a weight row 0 has already rewritten.
    x, r = make((64, 256), dtype, 1), make((64, 256), dtype, 2)
    want_y, want_h = ops(ns).add_rms_norm(x, r, r[row].clone(), 1e-6)
    y = ops(ns).add_rms_norm_(x, r, r[row], 1e-6)
    assert torch.equal(r, want_h)
    assert torch.equal(y, want_y)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_add_rms_norm_in_place_with_a_strided_residual_holding_the_weight(ns):
    x = make((8, 16), torch.float32, 3)
    r = make((16, 8), torch.float32, 4).t()  # not contiguous: written through a temporary
    w = r[2]  # a strided row of r, read while the rows of r are written
    want_y, want_h = ops(ns).add_rms_norm(x, r, w.clone(), 1e-6)
    y = ops(ns).add_rms_norm_(x, r, w, 1e-6)
    assert torch.equal(r, want_h) and torch.equal(y, want_y)


def test_bridge_out_holding_the_weight_is_read_as_called():
    x = np.array([[4, 0, 0, 0], [1, 1, 1, 1]], dtype=np.float32)
    out = np.array([[1, 2, 3, 4], [0, 0, 0, 0]], dtype=np.float32)
    tb.rms_norm(x, out[0], 0.0, out=out)  # the weight is out's first row
    np.testing.assert_array_equal(out, [[2, 0, 0, 0], [1, 2, 3, 4]])
    xi = np.array([[1, 2, 3, 4], [1, 1, 1, 1]], dtype=np.float32)
    want = tb.rms_norm(xi, xi[0].copy(), 0.0)
    tb.rms_norm(xi, xi[0], 0.0, out=xi)  # in place, the weight x's first row
    np.testing.assert_array_equal(xi, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_bridge_weight_inside_out_many_rows(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 256)).astype(dtype)
    for row in (0, 40, 63):
        out = rng.standard_normal((64, 256)).astype(dtype)
        want = tb.rms_norm(x, out[row].copy(), 1e-6)
        tb.rms_norm(x, out[row], 1e-6, out=out)
        np.testing.assert_array_equal(out, want)


# ---- 2. the building blocks refuse a derivative they would cut -------------------


@pytest.mark.parametrize("ns", NAMESPACES)
def test_rms_norm_backward_refuses_a_weight_or_rstd_that_requires_grad(ns):
    x, g = make((3, 8), torch.float32, 6), make((3, 8), torch.float32, 7)
    w = make((8,), torch.float32, 8)
    _, rstd = ops(ns)._rms_norm_forward(x, w, 1e-6)
    for args in (
        (g, x, w.clone().requires_grad_(), rstd),
        (g, x, w, rstd.clone().requires_grad_()),
    ):
        with pytest.raises(RuntimeError, match=rf"{ns}::_rms_norm_backward: not differentiable"):
            ops(ns)._rms_norm_backward(*args)
    if ns == "tierkit":
        # tierkit::'s forward differentiates y as the op does (torch.func's
        # nested levels reach it: hessian, jacrev of jacrev); its stats are
        # not differentiable, as aten's native_layer_norm's are not.
        wg = w.clone().requires_grad_()
        y, stats = ops(ns)._rms_norm_forward(x, wg, 1e-6)
        assert y.requires_grad and not stats.requires_grad
        (dw,) = torch.autograd.grad(y.sum(), wg)
        (want,) = torch.autograd.grad(ops(ns).rms_norm(x, wg, 1e-6).sum(), wg)
        assert torch.equal(dw, want)
    else:
        with pytest.raises(RuntimeError, match=rf"{ns}::_rms_norm_forward: not differentiable"):
            ops(ns)._rms_norm_forward(x, w.clone().requires_grad_(), 1e-6)
    with torch.no_grad():  # without grad mode, the building block computes
        dx, dw = ops(ns)._rms_norm_backward(g, x, w.clone().requires_grad_(), rstd)
    want_dx, want_dw = ops(ns)._rms_norm_backward(g, x, w, rstd)
    assert torch.equal(dx, want_dx) and torch.equal(dw, want_dw)


# tierkit::'s building blocks take tangents: torch.func's jacfwd over
# rms_norm's backward graph reaches them with its own, legitimately.
@pytest.mark.parametrize("ns", ["tierkit_stable"])
def test_rms_norm_building_blocks_refuse_a_tangent(ns):
    import torch.autograd.forward_ad as fwAD

    x, g = make((3, 8), torch.float32, 6), make((3, 8), torch.float32, 7)
    w = make((8,), torch.float32, 8)
    _, rstd = ops(ns)._rms_norm_forward(x, w, 1e-6)
    with fwAD.dual_level():
        wd = fwAD.make_dual(w, torch.ones_like(w))
        with pytest.raises(RuntimeError, match=rf"{ns}::_rms_norm_backward: not differentiable"):
            ops(ns)._rms_norm_backward(g, x, wd, rstd)
        with pytest.raises(RuntimeError, match=rf"{ns}::_rms_norm_forward: not differentiable"):
            ops(ns)._rms_norm_forward(x, wd, 1e-6)


# ---- 4. writes into inference tensors outside inference mode --------------------


def _inference(*tensors):
    with torch.inference_mode():
        return [t.clone() for t in tensors]


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("all_inference", [True, False])
def test_add_rms_norm_in_place_refuses_an_inference_residual_outside_inference_mode(ns, all_inference):
    x, r, w = (
        make((4, 16), torch.float32, 9),
        make((4, 16), torch.float32, 10),
        make((16,), torch.float32, 11),
    )
    r_inf, r_aten = _inference(r, r)
    if all_inference:
        x, w = _inference(x, w)
    # aten says the same for r.add_(x) (after writing: tierkit refuses before)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        r_aten.add_(x)
    with pytest.raises(
        RuntimeError, match=rf"{ns}::add_rms_norm_: residual: Inplace update to inference tensor outside"
    ):
        ops(ns).add_rms_norm_(x, r_inf, w, 1e-6)
    assert torch.equal(r_inf, r)  # untouched
    with torch.inference_mode():  # inside inference mode it computes
        want_y, want_h = ops(ns).add_rms_norm(x, r, w, 1e-6)
        y = ops(ns).add_rms_norm_(x, r_inf, w, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(r_inf, want_h)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(
    "call",
    [
        lambda o, a, b, out: o.mul.out(a, b, out=out),
        lambda o, a, b, out: o.custom_add.out(a, b, out=out),
        lambda o, a, b, out: o.scale_shift.out(a, 2.0, 1.0, out=out),
        lambda o, a, b, out: o.add_out(a, b, out),
    ],
    ids=["mul", "custom_add", "scale_shift", "add_out"],
)
def test_out_overloads_refuse_an_all_inference_call_outside_inference_mode(ns, call):
    a, b, out = _inference(torch.ones(5), torch.full((5,), 2.0), torch.zeros(5))
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        call(ops(ns), a, b, out)
    assert not out.any()
    with torch.inference_mode():
        call(ops(ns), a, b, out)
    assert out.any()


# ---- 9. an inference x against a weight that requires grad ----------------------


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("which", ["x", "weight"])
def test_an_inference_tensor_is_differentiated_against_the_other_as_in_aten(ns, which):
    x, w = make((4, 16), torch.float64, 12), make((16,), torch.float64, 13)
    x_inf, w_inf = _inference(x, w)
    if which == "x":  # x frozen, the weight learns: aten computes this
        args_ours, args_aten = (x_inf, w.clone().requires_grad_()), (x_inf, w.clone().requires_grad_())
    else:  # aten refuses a frozen weight ("cannot be saved for backward"); tierkit computes it
        args_ours, args_aten = (x.clone().requires_grad_(), w_inf), (x.clone().requires_grad_(), w.clone())
    ops(ns).rms_norm(*args_ours, 1e-6).square().sum().backward()
    F.rms_norm(args_aten[0], (16,), args_aten[1], 1e-6).square().sum().backward()
    learner = 1 if which == "x" else 0
    torch.testing.assert_close(args_ours[learner].grad, args_aten[learner].grad)


# ---- 10. interleaved views share no element -------------------------------------


@pytest.mark.parametrize("ns", NAMESPACES)
def test_add_rms_norm_in_place_over_interleaved_views(ns):
    base = make((4, 32), torch.float32, 14)
    x, r = base[:, ::2], base[:, 1::2]
    w = make((16,), torch.float32, 15)
    want_y, want_h = ops(ns).add_rms_norm(x.clone(), r.clone(), w, 1e-6)
    y = ops(ns).add_rms_norm_(x, r, w, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(r, want_h)
    with pytest.raises(RuntimeError, match=rf"{ns}::add_rms_norm_: residual: partially overlaps x"):
        big = torch.zeros(5, 16)
        ops(ns).add_rms_norm_(big[:4], big[1:], w)


# ---- 3. silu_mul of two NaNs: a NaN at every position, its sign unspecified -----


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_silu_mul_of_nan_pairs_is_nan_at_every_position_in_every_tier(dtype):
    nan = float("nan")
    for a_sign, b_sign in [(1, -1), (-1, 1), (1, 1), (-1, -1)]:
        a = torch.full((35,), a_sign * nan, dtype=dtype)
        b = torch.full((35,), b_sign * nan, dtype=dtype)
        for result in (
            torch.ops.tierkit.silu_mul(a, b),
            torch.ops.tierkit_stable.silu_mul(a, b),
            tb.silu_mul(a, b),
        ):
            assert torch.isnan(result).all(), result


@pytest.mark.parametrize("ns", NAMESPACES)
def test_add_rms_norm_in_place_with_residual_x_itself_above_eight_dims(ns):
    # Deeper than core's views: exactly x is still in place, not "partial".
    x = make([1] * 8 + [16], torch.float32, 16)
    want_y, want_h = ops(ns).add_rms_norm(x.clone(), x.clone(), None, 1e-6)
    y = ops(ns).add_rms_norm_(x, x, None, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(x, want_h)
