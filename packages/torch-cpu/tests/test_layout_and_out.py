"""Memory formats like aten, and the out= overloads in aten's convention."""

import pytest
import torch
from reference import ALPHA, ARITY, BETA, C, call, expected, scalars, tolerance

ops = torch.ops.tierkit


def layouts(gen):
    yield (
        "channels_last",
        lambda: torch.randn(2, 3, 4, 5, generator=gen).to(memory_format=torch.channels_last),
    )
    yield (
        "channels_last_3d",
        lambda: torch.randn(2, 3, 2, 4, 5, generator=gen).to(memory_format=torch.channels_last_3d),
    )
    yield "transposed", lambda: torch.randn(7, 9, generator=gen).t()
    yield "permuted 3-d", lambda: torch.randn(4, 5, 6, generator=gen).permute(2, 0, 1)


@pytest.mark.parametrize("op", list(ARITY))
def test_dense_layouts_are_kept_like_aten(op, gen):
    for name, make in layouts(gen):
        xs = [make() for _ in range(ARITY[op])]
        got, want = call(op, *xs), expected(op, *xs)
        assert got.stride() == want.stride(), name
        torch.testing.assert_close(got, want, **tolerance(op, torch.float32))


def test_mixed_layouts_are_laid_out_as_aten_lays_them(gen):
    a = torch.randn(2, 3, 4, 5, generator=gen).to(memory_format=torch.channels_last)
    b = torch.randn(2, 3, 4, 5, generator=gen)
    for x, y in ((a, b), (b, a), (a.transpose(1, 2), b.transpose(1, 2)), (a[:, :, ::2], b[:, :, ::2])):
        got, want = ops.custom_add(x, y), x + y
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fake_kernels_report_the_same_strides(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    for _, make in layouts(gen):
        x = make()
        real = (ops.scale_shift(x, ALPHA, BETA).stride(), ops.mul(x, x).stride())
        fx = mode.from_tensor(x)
        with mode:
            fake = (ops.scale_shift(fx, ALPHA, BETA).stride(), ops.mul(fx, fx).stride())
        assert fake == real


def _out_call(op):
    return lambda a, b, out: getattr(ops, op).out(*[a, b][: ARITY[op]], *scalars(op), out=out)


OUT_CALLS = {op: _out_call(op) for op in ARITY}  # every op's .out overload, (a, b, out) -> out


@pytest.mark.parametrize("op", list(OUT_CALLS))
def test_out_overload_writes_and_returns_out(op, gen):
    a, b = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    out = torch.empty(4, 6)
    result = OUT_CALLS[op](a, b, out)
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected(op, *([a, b][: ARITY[op]])), **tolerance(op, torch.float32))
    strided = torch.empty(6, 4).t()  # a strided out is written in place, strides kept
    OUT_CALLS[op](a, b, strided)
    assert strided.stride() == (1, 4)
    torch.testing.assert_close(strided, out, rtol=0, atol=0)


@pytest.mark.parametrize("op", list(OUT_CALLS))
def test_out_rules_follow_aten(op, gen):
    a, b = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    empty = torch.empty(0)
    OUT_CALLS[op](a, b, empty)  # an empty out is resized
    assert empty.shape == (4, 6)
    torch.testing.assert_close(empty, expected(op, *([a, b][: ARITY[op]])), **tolerance(op, torch.float32))
    with pytest.raises(RuntimeError, match=r"out: expected shape \[4, 6\] \(the result's\), got \[3\]"):
        OUT_CALLS[op](a, b, torch.empty(3))
    with pytest.raises(
        RuntimeError, match=r"out: expected a dtype the result \(float32\) can be cast to, got int64"
    ):
        OUT_CALLS[op](a, b, torch.empty(4, 6, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="does not support automatic differentiation"):
        OUT_CALLS[op](a.requires_grad_(), b, torch.empty(4, 6))


def test_out_bumps_version_so_autograd_sees_the_write(gen):
    x = torch.randn(5, generator=gen, requires_grad=True)
    y = x.exp()  # saves its output
    with torch.no_grad():
        ops.mul.out(y, y, out=y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_typed_face_out_keyword(gen):
    import tierkit_torch

    a = torch.randn(8, generator=gen)
    out = torch.empty(8)
    assert tierkit_torch.scale_shift(a, 2, 1, out=out) is out
    torch.testing.assert_close(out, 2 * a + 1, rtol=0, atol=0)


def test_out_overloads_under_compile(gen):
    torch._dynamo.reset()

    @torch.compile(fullgraph=True)
    def f(a, b, out):
        ops.custom_add.out(a, b, out=out)
        return ops.muladd.out(out, b, C, out=out)

    a, b = torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    out = torch.empty(16)
    f(a, b, out)
    torch.testing.assert_close(out, (a + b) * b + C)
    torch._dynamo.reset()


@pytest.mark.parametrize("op", [*ARITY, "add_out"])
def test_beyond_core_rank_limit(op, gen):
    # Deeper than core's 8 dims: a dense permuted tensor (once an endless
    # recursion: the fresh output kept the layout core cannot walk), a sliced
    # one (contiguous copies), and an out= of either kind.
    dense = torch.randn([2] * 10, generator=gen).transpose(0, 9)
    sliced = torch.randn([2] * 9 + [4], generator=gen)[..., ::2]
    for a in (dense, sliced):
        want = expected("custom_add", a, a) if op == "add_out" else expected(op, *[a] * ARITY[op])
        if op == "add_out":
            out = torch.empty_like(a)
            ops.add_out(a, a, out)
            torch.testing.assert_close(out, want, rtol=0, atol=0)
            continue
        tol = tolerance(op, torch.float32)
        torch.testing.assert_close(call(op, *[a] * ARITY[op]), want, **tol)
        args = (*[a] * ARITY[op], *scalars(op))
        for out in (torch.empty_like(dense), torch.empty([2] * 9 + [4])[..., ::2]):
            getattr(ops, op).out(*args, out=out)
            torch.testing.assert_close(out, want, **tol)
