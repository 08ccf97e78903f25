"""GPU tests: skipped without a CUDA device, run where one exists."""

import pytest
import tierkit_cuda
import torch
from conftest import DTYPES, gpu
from tierkit_torch_common import testing
from tierkit_torch_common.testing import ALPHA, ARITY, BETA, C, expected, scalars, tolerance

pytestmark = gpu
ops = torch.ops.tierkit
# The op table drives these tests as it drives torch-cpu's: each entry's
# reference formula, scalars and tolerance (tierkit_torch_common.testing).


def call(op, *inputs, **kwargs):
    return testing.call("tierkit", op, *inputs, **kwargs)


def layouts(dtype):
    def r(*shape):
        return torch.randn(*shape, device="cuda").to(dtype)

    yield "contiguous", lambda: r(1000, 33)
    yield "odd-length", lambda: r(1_000_003)  # vector body plus scalar tail
    yield "misaligned", lambda: r(1025)[1:]  # not 16-byte aligned: scalar path
    yield "transposed", lambda: r(33, 100).t()
    yield "sliced", lambda: r(64, 64)[::2, 1::3]
    yield "expanded", lambda: r(1, 77).expand(50, 77)
    yield "zero-dim", lambda: r(())
    yield "empty", lambda: r(0, 3)
    yield "channels_last", lambda: r(2, 3, 8, 8).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(ARITY))
def test_matches_torch(op, dtype):
    for name, make in layouts(dtype):
        inputs = [make() for _ in range(ARITY[op])]
        got = call(op, *inputs)
        assert got.device == inputs[0].device and got.dtype == dtype, name
        if name in ("channels_last", "transposed"):  # dense layouts are kept, as aten keeps them
            assert got.stride() == inputs[0].stride(), name
        torch.testing.assert_close(got, expected(op, *inputs), msg=f"{op} {name}", **tolerance(op, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_out_in_place_and_strided(dtype):
    a = torch.randn(4096, device="cuda").to(dtype)
    b = torch.randn(4096, device="cuda").to(dtype)
    want = expected("custom_add", a, b)
    ops.add_out(a, b, a)
    torch.testing.assert_close(a, want, rtol=0, atol=0)
    big = torch.zeros(64, 128, device="cuda", dtype=dtype)
    x = torch.randn(64, 64, device="cuda").to(dtype)
    ops.add_out(x, x, big[:, ::2])
    torch.testing.assert_close(big[:, ::2], expected("custom_add", x, x), rtol=0, atol=0)
    assert not big[:, 1::2].any()


def test_more_than_2_to_the_31_elements():
    n = (1 << 31) + 4097
    if torch.cuda.mem_get_info()[0] < 3 * n * 2 * 1.2:
        pytest.skip("not enough free GPU memory for three 2^31-element bfloat16 tensors")
    a = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    out = ops.scale_shift(a, 2.0, 1.0)
    assert out[-1].item() == 3.0 and out[0].item() == 3.0
    assert (out == 3.0).all().item()
    del out
    b = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    ops.add_out(a, b, a)
    assert a[-4097:].eq(2.0).all().item()


@pytest.mark.parametrize(
    ("call_", "pattern"),
    [
        (
            lambda: ops.custom_add(torch.ones(3, device="cuda"), torch.ones(3)),
            "b: expected device cuda:0 \\(same as a\\), got cpu",
        ),
        (
            lambda: ops.mul(
                torch.ones(3, device="cuda", dtype=torch.int32),
                torch.ones(3, device="cuda", dtype=torch.int32),
            ),
            "a: expected dtype float32, float64, float16 or bfloat16, got int32",
        ),
        (
            lambda: ops.muladd(torch.ones(3, device="cuda"), torch.ones(4, device="cuda"), 1.0),
            "b: expected shape \\[3\\] \\(same as a\\), got \\[4\\]",
        ),
    ],
    ids=["cpu-mix", "int", "shape"],
)
def test_errors(call_, pattern):
    with pytest.raises(RuntimeError, match=pattern):
        call_()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_mixed_is_refused_and_cuda1_works():
    a = torch.randn(100, device="cuda:1")
    torch.testing.assert_close(ops.scale_shift(a, 2.0, 1.0), 2 * a + 1, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="b: expected device cuda:1 \\(same as a\\), got cuda:0"):
        ops.custom_add(a, torch.randn(100, device="cuda:0"))


def test_non_default_stream():
    s = torch.cuda.Stream()
    a = torch.randn(1 << 22, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        out = ops.scale_shift(a, 3.0, 1.0)
        out2 = ops.custom_add(out, a)
    s.synchronize()
    torch.testing.assert_close(out2, (3 * a + 1) + a)


@pytest.mark.parametrize("op", list(ARITY))
def test_gradcheck_float64(op):
    xs = testing.random_inputs(op, 6, dtype=torch.float64, requires_grad=True, device="cuda")
    assert torch.autograd.gradcheck(lambda *x: call(op, *x), xs, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda *x: call(op, *x), xs)


@pytest.mark.parametrize("op", list(ARITY))
def test_compile_dynamic_and_backward(op):
    xs = testing.random_inputs(op, 257, requires_grad=True, device="cuda")
    ys = [x.detach().clone().requires_grad_() for x in xs]
    got = torch.compile(lambda *x: call(op, *x), fullgraph=True, dynamic=True)(*xs)
    torch.testing.assert_close(got, expected(op, *xs), **tolerance(op, torch.float32))
    got.sum().backward()
    testing.composite(op, *ys).sum().backward()
    for x, y in zip(xs, ys):
        torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("op", list(ARITY) + ["add_out"])
def test_opcheck(op):
    a = torch.randn(8, 3, device="cuda")
    b = torch.randn(8, 3, device="cuda")
    if op == "add_out":
        args = (a, b, torch.empty_like(b))
    else:
        args = (a.requires_grad_(), b, *scalars(op)) if ARITY[op] == 2 else (a.requires_grad_(), *scalars(op))
    result = torch.library.opcheck(getattr(ops, op).default, args)
    assert all(v == "SUCCESS" for v in result.values()), result


def test_compile_reduce_overhead():
    # CUDA graphs replay on their own stream: kernels must launch on the
    # current stream, not the default one (pytorch#157363).
    torch._dynamo.reset()

    def f(a, b):
        return ops.muladd(ops.scale_shift(a, ALPHA, BETA), b, C)

    a, b = torch.randn(1 << 16, device="cuda"), torch.randn(1 << 16, device="cuda")
    compiled = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = compiled(a, b).clone()
    torch.testing.assert_close(got, (ALPHA * a + BETA) * b + C)


def test_time_op_returns_positive_ms():
    a = torch.randn(1 << 20, device="cuda")
    assert tierkit_cuda.time_op("scale_shift", a, iters=5) > 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(ARITY))
def test_out_overloads(op, dtype):
    xs = testing.random_inputs(op, 300, dtype=dtype, device="cuda")
    out = torch.empty(0, device="cuda", dtype=dtype)
    assert call(op, *xs, out=out).data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected(op, *xs), **tolerance(op, dtype))
    with pytest.raises(RuntimeError, match=r"out: expected shape \[300\]"):
        call(op, *xs, out=torch.empty(7, device="cuda", dtype=dtype))


def test_forward_ad_on_cuda():
    x = torch.randn(64, device="cuda", dtype=torch.float64)
    t = torch.randn(64, device="cuda", dtype=torch.float64)
    _, tangent = torch.func.jvp(lambda v: ops.mul(v, v), (x,), (t,))
    torch.testing.assert_close(tangent, 2 * x * t)
