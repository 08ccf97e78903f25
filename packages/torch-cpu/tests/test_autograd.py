"""Gradients: gradcheck in float64, agreement with the composite expression,
partial requires_grad, double backward."""

import pytest
import torch
from reference import ARITY, call, composite

OPS = list(ARITY)


def inputs(op, gen, requires=(True, True), shape=(4, 5)):
    return [
        torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(requires[i])
        for i in range(ARITY[op])
    ]


@pytest.mark.parametrize("op", OPS)
def test_gradcheck(op, gen):
    assert torch.autograd.gradcheck(lambda *x: call(op, *x), inputs(op, gen))


@pytest.mark.parametrize("op", OPS)
def test_gradgradcheck(op, gen):
    assert torch.autograd.gradgradcheck(lambda *x: call(op, *x), inputs(op, gen))


@pytest.mark.parametrize("op", OPS)
def test_gradients_match_composite(op, gen):
    xs = inputs(op, gen)
    ys = [x.detach().clone().requires_grad_() for x in xs]
    g = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    call(op, *xs).backward(g)
    composite(op, *ys).backward(g)
    for x, y in zip(xs, ys):
        torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("op", ["custom_add", "mul", "muladd"])
@pytest.mark.parametrize("which", [(True, False), (False, True)])
def test_only_some_inputs_require_grad(op, which, gen):
    xs = inputs(op, gen, requires=which)
    ys = [x.detach().clone().requires_grad_(x.requires_grad) for x in xs]
    call(op, *xs).sum().backward()
    composite(op, *ys).sum().backward()
    for x, y in zip(xs, ys):
        assert (x.grad is None) == (not x.requires_grad)
        if x.requires_grad:
            torch.testing.assert_close(x.grad, y.grad)


def test_no_grad_inputs_give_no_graph(gen):
    a, b = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    assert call("mul", a, b).grad_fn is None


def test_float32_grad_through_expanded_grad(gen):
    # sum() hands back an expanded (stride 0) gradient; the kernels read it in place.
    a = torch.randn(64, 64, generator=gen, requires_grad=True)
    b = torch.randn(64, 64, generator=gen)
    torch.ops.tierkit.muladd(a, b, 2.0).sum().backward()
    torch.testing.assert_close(a.grad, b)
