"""Autograd registered from Python: reverse mode, forward mode, double
backward; clear refusals where no derivative can be given (out= overloads,
torch.func's differentiating transforms) -- never a silent zero."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401
import torch
import torch.autograd.forward_ad as fwAD
from tierkit_core.op_table import OPS
from tierkit_torch_common import testing

ops = torch.ops.tierkit_stable

NS = "tierkit_stable"
# Every entry of the op table with a derivative, from its entry alone: its
# kernel against its reference formula in differentiable torch ops.
DIFFERENTIABLE = [op.name for op in OPS if op.derivatives]


def double(op: str, *shape: int) -> list[torch.Tensor]:
    return testing.random_inputs(op, *shape, dtype=torch.float64, requires_grad=True)


def ours(op: str):
    return lambda *x: testing.call(NS, op, *x)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradcheck_reverse_and_forward(name):
    assert torch.autograd.gradcheck(ours(name), double(name, 3, 4), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(ours(name), double(name, 3, 4))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_grads_equal_torch(name):
    xs = double(name, 5)
    ys = [x.detach().clone().requires_grad_() for x in xs]
    g = torch.randn(5, dtype=torch.float64)
    got = torch.autograd.grad(testing.call(NS, name, *xs), xs, g, allow_unused=True)
    want = torch.autograd.grad(testing.composite(name, *ys), ys, g, allow_unused=True)
    for x, y in zip(got, want):
        if y is None:
            assert x is None or torch.count_nonzero(x) == 0
        else:
            torch.testing.assert_close(x, y)


@pytest.mark.parametrize(
    ("name", "which"),
    [(op, i) for op in DIFFERENTIABLE for i in range(testing.ARITY[op]) if testing.ARITY[op] > 1],
)
def test_only_one_input_requiring_grad(name, which):
    xs = double(name, 6)
    for i, x in enumerate(xs):
        x.requires_grad_(i == which)
    (got,) = torch.autograd.grad(testing.call(NS, name, *xs).sum(), xs[which])
    (want,) = torch.autograd.grad(testing.composite(name, *xs).sum(), xs[which])
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_forward_ad_tangent_equals_torch(name):
    primals = testing.random_inputs(name, 4, dtype=torch.float64)
    tangents = testing.random_inputs(name, 4, dtype=torch.float64)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip(primals, tangents)]
        got = fwAD.unpack_dual(testing.call(NS, name, *duals)).tangent
        want = fwAD.unpack_dual(testing.composite(name, *duals)).tangent
    assert got is not None
    torch.testing.assert_close(got, want)


def test_grad_fn_names_the_op():
    a = torch.randn(3, requires_grad=True)
    assert "ScaleShift" in type(ops.scale_shift(a, 2.0, 1.0).grad_fn).__name__


def test_no_grad_call_builds_no_graph():
    a = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        assert ops.mul(a, a).grad_fn is None


@pytest.mark.parametrize("transform", ["grad", "jvp", "jacrev", "jacfwd"])
def test_torch_func_differentiation_is_refused_clearly(transform):
    v = torch.randn(3)
    f = lambda a: ops.mul(a, a)  # noqa: E731
    calls = {
        "grad": lambda: torch.func.grad(lambda a: f(a).sum())(v),
        "jvp": lambda: torch.func.jvp(f, (v,), (torch.ones(3),)),
        "jacrev": lambda: torch.func.jacrev(f)(v),
        "jacfwd": lambda: torch.func.jacfwd(f)(v),
    }
    with pytest.raises(RuntimeError, match=r"tierkit_stable::mul: torch.func transforms that differentiate"):
        calls[transform]()


def test_vmap_without_differentiation_works():
    x = torch.randn(4, 3)
    torch.testing.assert_close(torch.func.vmap(lambda a: ops.mul(a, a))(x), x * x, rtol=0, atol=0)


def test_out_overloads_refuse_requires_grad():
    a = torch.randn(3, requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match=r"tierkit_stable::custom_add.out: writes into `out` and does not support automatic",
    ):
        ops.custom_add.out(a, a, out=torch.empty(3))
    with pytest.raises(RuntimeError, match=r"tierkit_stable::add_out: writes into `out`"):
        ops.add_out(a, a, torch.empty(3))
    with torch.no_grad():
        out = torch.empty(3)
        ops.custom_add.out(a, a, out=out)
        torch.testing.assert_close(out, a.detach() * 2)


def test_out_overloads_refuse_tangents():
    with fwAD.dual_level():
        d = fwAD.make_dual(torch.randn(3), torch.ones(3))
        with pytest.raises(RuntimeError, match=r"does not support forward-mode AD"):
            ops.mul.out(d, d, out=torch.empty(3))


def test_stale_saved_tensor_after_out_write_is_refused():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    y = ops.mul(a, b)  # saves b
    with torch.no_grad():
        ops.custom_add.out(b, b, out=b)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
