"""vmap over every op with the per-example fallback disabled: a missing
batching rule is an error here, not a slow path."""

import pytest
import torch
from reference import ARITY, call, composite, tolerance

OPS = list(ARITY)


@pytest.fixture(autouse=True)
def no_vmap_fallback():
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


def batched(gen, *shape):
    return torch.randn(*shape, generator=gen)


@pytest.mark.parametrize("op", OPS)
def test_batch_dim_zero(op, gen):
    xs = [batched(gen, 4, 5, 3) for _ in range(ARITY[op])]
    got = torch.vmap(lambda *x: call(op, *x))(*xs)
    torch.testing.assert_close(got, composite(op, *xs), **tolerance(op, torch.float32))


@pytest.mark.parametrize("op", [op for op in OPS if ARITY[op] == 2])
@pytest.mark.parametrize("in_dims", [(0, None), (None, 0), (1, 0), (2, None), (None, 1)])
def test_mixed_and_missing_batch_dims(op, in_dims, gen):
    shape = (3, 5)
    a = (
        batched(gen, *shape)
        if in_dims[0] is None
        else batched(gen, *shape).unsqueeze(in_dims[0]).repeat_interleave(4, in_dims[0])
    )
    b = (
        batched(gen, *shape)
        if in_dims[1] is None
        else batched(gen, *shape).unsqueeze(in_dims[1]).repeat_interleave(4, in_dims[1])
    )
    got = torch.vmap(lambda x, y: call(op, x, y), in_dims=in_dims)(a, b)
    want = torch.vmap(lambda x, y: composite(op, x, y), in_dims=in_dims)(a, b)
    torch.testing.assert_close(got, want, **tolerance(op, torch.float32))


@pytest.mark.parametrize("op", OPS)
def test_nested_vmap(op, gen):
    xs = [batched(gen, 2, 3, 4) for _ in range(ARITY[op])]
    got = torch.vmap(torch.vmap(lambda *x: call(op, *x)))(*xs)
    torch.testing.assert_close(got, composite(op, *xs), **tolerance(op, torch.float32))


@pytest.mark.parametrize("op", OPS)
def test_vmap_of_grad(op, gen):
    xs = [batched(gen, 4, 6).double() for _ in range(ARITY[op])]

    def f(fn):
        return torch.vmap(torch.func.grad(lambda *x: fn(*x).pow(2).sum()))

    torch.testing.assert_close(f(lambda *x: call(op, *x))(*xs), f(lambda *x: composite(op, *x))(*xs))


def test_the_fallback_is_really_off():
    # A op without a rule must fail under this fixture, or the tests above prove nothing.
    lib = torch.library.Library("tierkit_vmap_probe", "FRAGMENT")
    lib.define("noop(Tensor x) -> Tensor")
    lib.impl("noop", lambda x: x.clone(), "CompositeExplicitAutograd")
    with pytest.raises(RuntimeError, match="vmap fallback"):
        torch.vmap(torch.ops.tierkit_vmap_probe.noop)(torch.randn(2, 3))
