"""Autograd registered from Python: reverse mode, forward mode, double
backward; clear refusals where no derivative can be given (out= overloads,
torch.func's differentiating transforms) -- never a silent zero."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401
import torch
import torch.autograd.forward_ad as fwAD

ops = torch.ops.tierkit_stable

FUNCTIONS = {
    "custom_add": (lambda a, b: ops.custom_add(a, b), lambda a, b: a + b),
    "mul": (lambda a, b: ops.mul(a, b), lambda a, b: a * b),
    "muladd": (lambda a, b: ops.muladd(a, b, 0.5), lambda a, b: a * b + 0.5),
    "scale_shift": (lambda a, b: ops.scale_shift(a, 1.5, -0.25), lambda a, b: a * 1.5 - 0.25),
}


def double(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_gradcheck_reverse_and_forward(name):
    f = FUNCTIONS[name][0]
    assert torch.autograd.gradcheck(f, (double(3, 4), double(3, 4)), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(f, (double(3, 4), double(3, 4)))


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_grads_equal_torch(name):
    ours, theirs = FUNCTIONS[name]
    a, b = double(5), double(5)
    g1 = torch.autograd.grad(ours(a, b).sum(), (a, b), allow_unused=True)
    g2 = torch.autograd.grad(theirs(a, b).sum(), (a, b), allow_unused=True)
    for x, y in zip(g1, g2):
        if y is None:
            assert x is None or torch.count_nonzero(x) == 0
        else:
            torch.testing.assert_close(x, y)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_forward_ad_tangent_equals_torch(name):
    ours, theirs = FUNCTIONS[name]
    a, b, ta, tb = (torch.randn(4, dtype=torch.float64) for _ in range(4))
    with fwAD.dual_level():
        got = fwAD.unpack_dual(ours(fwAD.make_dual(a, ta), fwAD.make_dual(b, tb))).tangent
        want = fwAD.unpack_dual(theirs(fwAD.make_dual(a, ta), fwAD.make_dual(b, tb))).tangent
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
