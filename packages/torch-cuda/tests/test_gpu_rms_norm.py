"""GPU tests of the row reductions (rms_norm and its family) against the CPU
kernels (torch-cpu's, core's arithmetic) and float64: skipped without a CUDA
device, run where one exists. The GPU sums a row in another order (lanes,
then a shuffle tree), so results agree within the compute type's rounding,
not bit for bit; h = x + residual is one rounding on both, so it is exact."""

import pytest
import torch
from conftest import DTYPES, gpu

pytestmark = gpu
ops = torch.ops.tierkit
# (rows, d): warp-per-row (d <= 1024) and block-per-row paths, vector and
# scalar loops (d a multiple of the 16-byte width or not), a single row.
SHAPES = [(64, 128), (33, 1000), (7, 1024), (5, 4096), (3, 4097), (1, 12288), (300, 1)]


def rtol(dtype):
    # 16-bit: one rounding of y may land on the neighbouring value; float32
    # and float64: the sum's order moves rstd by a few ulps.
    return torch.finfo(dtype).eps * (1 if dtype in (torch.float16, torch.bfloat16) else 16)


def close(got, want, dtype, scale=1.0):
    want = want.to(got.device)
    tol = rtol(dtype) * scale
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * max(1.0, want.abs().max().item()))


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(dtype)
    return x, w


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_weight", [True, False])
def test_forward_matches_the_cpu(shape, dtype, with_weight):
    x, w = inputs(shape, dtype)
    w = w if with_weight else None
    want_y, want_r = ops._rms_norm_forward(x, w, 1e-6)
    y, r = ops._rms_norm_forward(x.cuda(), None if w is None else w.cuda(), 1e-6)
    assert y.is_cuda and y.dtype == dtype and r.dtype == want_r.dtype and r.shape == want_r.shape
    close(y, want_y, dtype)
    close(r, want_r, torch.float64 if dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backward_matches_the_cpu(shape, dtype):
    x, w = inputs(shape, dtype)
    g = inputs(shape, dtype, seed=1)[0]
    _, r = ops._rms_norm_forward(x, w, 1e-6)
    want_dx, want_dw = ops._rms_norm_backward(g, x, w, r)
    dx, dw = ops._rms_norm_backward(g.cuda(), x.cuda(), w.cuda(), r.cuda())
    close(dx, want_dx, dtype, scale=4)
    close(dw, want_dw, dtype, scale=4 * max(1, shape[0]) ** 0.5)  # a sum over the rows
    dx0, dw0 = ops._rms_norm_backward(g.cuda(), x.cuda(), None, r.cuda())
    close(dx0, ops._rms_norm_backward(g, x, None, r)[0], dtype, scale=4)
    assert dw0.numel() == 0


def test_backward_is_deterministic():
    x, w = inputs((4096, 512), torch.float32)
    g = inputs((4096, 512), torch.float32, seed=1)[0]
    x, w, g = x.cuda(), w.cuda(), g.cuda()
    _, r = ops._rms_norm_forward(x, w, 1e-6)
    first = ops._rms_norm_backward(g, x, w, r)
    for _ in range(3):
        again = ops._rms_norm_backward(g, x, w, r)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rms_norm_and_in_place(dtype):
    x, w = inputs((17, 2048), dtype)
    res = inputs((17, 2048), dtype, seed=2)[0]
    y, h = ops.add_rms_norm(x.cuda(), res.cuda(), w.cuda(), 1e-6)
    want_y, want_h = ops.add_rms_norm(x, res, w, 1e-6)
    assert torch.equal(h.cpu(), want_h)  # x + residual, rounded once on both
    close(y, want_y, dtype)
    r = res.cuda()
    version = r._version
    y2 = ops.add_rms_norm_(x.cuda(), r, w.cuda(), 1e-6)
    assert torch.equal(r.cpu(), want_h) and r._version > version
    close(y2, want_y, dtype)


def test_autograd_on_cuda_tensors():
    x, w = (t.double().cuda().requires_grad_() for t in inputs((4, 9), torch.float64))
    assert torch.autograd.gradcheck(lambda a, b: ops.rms_norm(a, b, 1e-5), (x, w), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda a, b: ops.rms_norm(a, b, 1e-5), (x, w))


def test_compile_fullgraph_dynamic():
    x, w = (t.cuda() for t in inputs((8, 256), torch.bfloat16))
    fn = torch.compile(lambda a, b: ops.rms_norm(a, b, 1e-6) * 2, fullgraph=True, dynamic=True)
    close(fn(x, w), ops.rms_norm(x, w, 1e-6) * 2, torch.bfloat16)


def test_empty_and_strided_inputs():
    assert ops.rms_norm(torch.empty(0, 64, device="cuda")).shape == (0, 64)
    assert ops.rms_norm(torch.empty(3, 0, device="cuda")).shape == (3, 0)
    x, w = inputs((64, 96), torch.float32)
    close(ops.rms_norm(x.cuda().t(), None, 1e-6), ops.rms_norm(x.t(), None, 1e-6), torch.float32)
    misaligned = x.cuda().flatten()[1 : 1 + 63 * 96].view(63, 96)  # not 16-byte aligned: the scalar loop
    close(ops.rms_norm(misaligned, w.cuda(), 1e-6), ops.rms_norm(misaligned.cpu(), w, 1e-6), torch.float32)


@pytest.mark.parametrize(
    "call_,pattern",
    [
        (
            lambda: ops.rms_norm(torch.ones(3, 4, device="cuda"), torch.ones(4)),
            r"weight: expected device cuda:0",
        ),
        (
            lambda: ops.rms_norm(torch.ones(3, 4, device="cuda"), torch.ones(5, device="cuda")),
            r"expected shape \[4\]",
        ),
        (
            lambda: ops.add_rms_norm(torch.ones(3, 4, device="cuda"), torch.ones(3, 4)),
            r"residual: expected device",
        ),
        (lambda: ops.rms_norm(torch.ones(3, dtype=torch.int32, device="cuda")), r"x: expected dtype"),
    ],
    ids=["weight-on-cpu", "weight-shape", "residual-on-cpu", "int"],
)
def test_errors_name_the_argument(call_, pattern):
    with pytest.raises(RuntimeError, match=r"tierkit::\w+: " + pattern):
        call_()


@pytest.mark.parametrize("row", [0, 500, 1023])
def test_add_rms_norm_in_place_with_the_weight_a_row_of_residual(row):
    # 1024 rows over many blocks: without the copy, blocks read the weight
    # while row `row`'s block rewrites it (a race).
    x, _ = inputs((1024, 2048), torch.float32, 1)
    r, _ = inputs((1024, 2048), torch.float32, 2)
    x, r = x.cuda(), r.cuda()
    want_y, want_h = ops.add_rms_norm(x, r, r[row].clone(), 1e-6)
    y = ops.add_rms_norm_(x, r, r[row], 1e-6)
    torch.cuda.synchronize()
    assert torch.equal(r, want_h) and torch.equal(y, want_y)


def test_backward_scratch_is_capped_like_the_cpu():
    # [1024, 2^16] float32: uncapped, 4 x SMs slots of d floats (132 SMs:
    # 138 MiB); capped at 2^22 elements, 16 MiB.
    x, w = inputs((1024, 1 << 16), torch.float32, 3)
    x, w, g = x.cuda(), w.cuda(), torch.randn(1024, 1 << 16, device="cuda")
    _, rstd = ops._rms_norm_forward(x, w, 1e-6)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    dx, dw = ops._rms_norm_backward(g, x, w, rstd)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before - dx.nbytes - dw.nbytes
    assert extra <= (1 << 22) * 4 + (1 << 20), extra
    want_dx, want_dw = ops._rms_norm_backward(g.cpu(), x.cpu(), w.cpu(), rstd.cpu())
    close(dx, want_dx, torch.float32, 4)
    close(dw, want_dw, torch.float32, 64)


@pytest.mark.parametrize(
    ("xd", "wd"),
    [(torch.bfloat16, torch.float32), (torch.float16, torch.bfloat16), (torch.float32, torch.float64)],
)
def test_a_weight_of_another_dtype_matches_the_cpu(xd, wd):
    # As aten's F.rms_norm: computed in x's compute type, output in x's dtype,
    # each gradient in its input's (torch-cpu's rows.h MixedRows, shared).
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(33, 1000, generator=g) * 3).to(xd)
    w = torch.randn(1000, generator=g).to(wd)
    got = ops.rms_norm(x.cuda(), w.cuda(), 1e-6)
    assert got.dtype == xd
    close(got, ops.rms_norm(x, w, 1e-6), xd)
    close(got, torch.nn.functional.rms_norm(x.cuda(), (1000,), w.cuda(), 1e-6), xd)
    xc, wc = x.cuda().requires_grad_(), w.cuda().requires_grad_()
    dx, dw = torch.autograd.grad(ops.rms_norm(xc, wc, 1e-6).sum(), (xc, wc))
    assert (dx.dtype, dw.dtype) == (xd, wd)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(ops.rms_norm(xr, wr, 1e-6).sum(), (xr, wr))
    close(dx, ex, xd, scale=4.0)
    close(dw, ew, wd, scale=4.0)
