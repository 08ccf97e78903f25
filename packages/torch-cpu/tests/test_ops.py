"""Every op against plain torch, for every dtype and layout."""

import pytest
import tierkit_torch
import torch
from conftest import DTYPES
from reference import ARITY, C, call, expected, tolerance


def layouts(gen, dtype):
    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 10).to(dtype)

    yield "contiguous", lambda: rand(33, 17)
    yield "transposed", lambda: rand(17, 33).t()
    yield "sliced", lambda: rand(40, 30)[::2, 1::3]
    yield "expanded", lambda: rand(1, 17).expand(33, 17)
    yield "zero-dim", lambda: rand(())
    yield "empty", lambda: rand(0, 4)
    yield "large", lambda: rand(1_000_003)  # several at::parallel_for chunks
    yield "nine-dims", lambda: rand(2, 1, 2, 1, 2, 1, 2, 1, 3)
    yield "nine-dims-strided", lambda: rand(2, 1, 2, 1, 2, 1, 2, 1, 6)[..., ::2]
    yield "channels-last", lambda: rand(2, 3, 4, 5).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(ARITY))
def test_matches_torch_on_every_layout(op, dtype, gen):
    for name, make in layouts(gen, dtype):
        inputs = [make() for _ in range(ARITY[op])]
        got = call(op, *inputs)
        want = expected(op, *inputs)
        assert got.dtype == dtype and got.shape == inputs[0].shape, name
        # Laid out as aten lays out the same expression (channels_last stays
        # channels_last, a transposed dense input gives a transposed result).
        assert strides_of(got) == strides_of(want), name
        torch.testing.assert_close(got, want, msg=f"{op} {name}", **tolerance(op, dtype))


def strides_of(t):
    """Strides of the dimensions that have more than one element (the others can be anything)."""
    return [s for s, n in zip(t.stride(), t.shape) if n > 1]


@pytest.mark.parametrize("op", list(ARITY))
def test_float32_matches_eager_expression(op, gen):
    # With float32 the kernel is the eager expression, rounding for rounding
    # (within the entry's ulps for a transcendental op).
    inputs = [torch.randn(4097, generator=gen) for _ in range(ARITY[op])]
    torch.testing.assert_close(call(op, *inputs), expected(op, *inputs), **tolerance(op, torch.float32))


def test_typed_face_matches_torch_ops(gen):
    a, b = torch.randn(100, generator=gen), torch.randn(100, generator=gen)
    assert torch.equal(tierkit_torch.custom_add(a, b), torch.ops.tierkit.custom_add(a, b))
    assert torch.equal(tierkit_torch.mul(a, b), torch.ops.tierkit.mul(a, b))
    assert torch.equal(tierkit_torch.scale_shift(a, 2, 3), torch.ops.tierkit.scale_shift(a, 2.0, 3.0))
    assert torch.equal(tierkit_torch.muladd(a, b, C), torch.ops.tierkit.muladd(a, b, C))
    out = torch.empty(100)
    assert tierkit_torch.add_out(a, b, out) is out
    assert torch.equal(out, a + b)


def test_docstrings():
    for name in ("custom_add", "mul", "scale_shift", "muladd", "add_out"):
        assert getattr(tierkit_torch.ops, name).__doc__


def test_inputs_untouched(gen):
    a, b = torch.randn(50, generator=gen), torch.randn(50, generator=gen)
    a0, b0 = a.clone(), b.clone()
    torch.ops.tierkit.muladd(a, b, 1.0)
    assert torch.equal(a, a0) and torch.equal(b, b0)


def test_special_values():
    a = torch.tensor([float("nan"), float("inf"), -0.0, -float("inf"), 1e-45, 3e38])
    b = torch.tensor([1.0, 1.0, -0.0, float("inf"), 1e-45, 3e38])
    got = torch.ops.tierkit.custom_add(a, b)
    torch.testing.assert_close(got, a + b, rtol=0, atol=0, equal_nan=True)
    assert torch.signbit(got[2])


def test_respects_torch_num_threads(gen):
    a = torch.randn(2_000_000, generator=gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.tierkit.scale_shift(a, 3.0, 1.0)
        torch.set_num_threads(max(2, before))
        many = torch.ops.tierkit.scale_shift(a, 3.0, 1.0)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, many)
