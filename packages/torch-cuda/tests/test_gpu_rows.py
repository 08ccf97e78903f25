"""GPU tests of every row reduction of the op table (ROW_REDUCTIONS: the
kind's generic CUDA kernels with each entry's functor) against the CPU
kernels and float64, table-driven: forward, backward (x and every
parameter), determinism and mixed dtypes. Skipped without a CUDA device.
test_gpu_rms_norm.py holds RMSNorm's own cases (fused forms, errors)."""

import pytest
import torch
from conftest import DTYPES, gpu, last
from tierkit_core.op_table import ROW_REDUCTIONS
from tierkit_torch_common.rows import reference

pytestmark = gpu
SHAPES = [(64, 128), (33, 1000), (5, 4096), (3, 4097), (300, 1)]
ENTRIES = [pytest.param(e, id=e.name) for e in ROW_REDUCTIONS]


def params_for(entry, d, dtype, g):
    return [(1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype) for _ in entry.params]


def tol(dtype):
    return torch.finfo(dtype).eps * (2 if dtype in (torch.float16, torch.bfloat16) else 32)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_backward_match_the_cpu_and_float64(entry, dtype, shape):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1).to(dtype)
    params = params_for(entry, shape[-1], dtype, g)
    dy = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
    op = getattr(torch.ops.tierkit, entry.name)
    eps = 1e-5
    cpu = [t.clone().requires_grad_() for t in (x, *params)]
    gpu_ = [t.cuda().requires_grad_() for t in (x, *params)]
    y_cpu, y_gpu = op(cpu[0], *cpu[1:], last(entry, eps)), op(gpu_[0], *gpu_[1:], last(entry, eps))
    exact = reference(torch, entry, x.double(), [p.double() for p in params], eps)
    t = tol(dtype) * max(1.0, exact.abs().max().item())
    torch.testing.assert_close(y_gpu.cpu(), y_cpu.detach(), rtol=tol(dtype), atol=t)
    torch.testing.assert_close(y_gpu.double().cpu(), exact, rtol=tol(dtype) * 4, atol=t * 4)
    grads_cpu = torch.autograd.grad(y_cpu, cpu, dy)
    grads_gpu = torch.autograd.grad(y_gpu, gpu_, dy.cuda())
    for a, b in zip(grads_gpu, grads_cpu):
        scale = max(1.0, b.double().abs().max().item())
        torch.testing.assert_close(a.cpu(), b, rtol=tol(dtype) * 16, atol=tol(dtype) * 16 * scale)


@pytest.mark.parametrize("entry", ENTRIES)
def test_backward_is_deterministic(entry):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4096, 512, generator=g).cuda().requires_grad_()
    params = [p.cuda().requires_grad_() for p in params_for(entry, 512, torch.float32, g)]
    op = getattr(torch.ops.tierkit, entry.name)
    dy = torch.randn(4096, 512).cuda()
    first = torch.autograd.grad(op(x, *params, last(entry)), [x, *params], dy)
    for _ in range(3):
        again = torch.autograd.grad(op(x, *params, last(entry)), [x, *params], dy)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("entry", ENTRIES)
def test_float32_parameters_with_bfloat16_input_match_the_cpu(entry):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 256, generator=g).to(torch.bfloat16)
    params = params_for(entry, 256, torch.float32, g)
    op = getattr(torch.ops.tierkit, entry.name)
    y_gpu = op(x.cuda(), *[p.cuda() for p in params], last(entry))
    y_cpu = op(x, *params, last(entry))
    assert y_gpu.dtype == torch.bfloat16
    torch.testing.assert_close(y_gpu.cpu().float(), y_cpu.float(), rtol=2**-7, atol=2**-7)


@pytest.mark.parametrize("entry", ENTRIES)
def test_compile_fullgraph_dynamic(entry):
    op = getattr(torch.ops.tierkit, entry.name)
    x = torch.randn(8, 64, device="cuda")
    params = [torch.randn(64, device="cuda") for _ in entry.params]
    fn = torch.compile(lambda x, *p: op(x, *p, last(entry)), fullgraph=True, dynamic=True)
    torch.testing.assert_close(fn(x, *params), op(x, *params, last(entry)))


@pytest.mark.parametrize("d", [64, 1000, 4096], ids=str)  # warp rows (vector, scalar), block rows
@pytest.mark.parametrize("spread", [1.0, 4e-3], ids=["std1", "std4e-3"])
def test_layer_norm_statistics_on_rows_with_a_large_mean(d, spread):
    """LayerNorm's mean and rstd on CUDA are core's formula (row_functors.cuh),
    so they match the CPU's and float64's to the documented tolerance (mean
    within an ulp, rstd within 1e-6 relative; only the sums' order differs)
    where the formula matters most: rows of 1e4 + noise in float32, values
    2^-10 apart. At a spread of a few ulps (std 4e-3) the variance about the
    rounded mean, mean((x - mean)^2), which this kernel computed before, is
    off by up to 1.5% (the rounded mean's error squared, against a variance
    of 1.6e-5); core's corrected two-pass variance is within 2e-7."""
    g = torch.Generator().manual_seed(3)
    x = (1e4 + torch.randn(64, d, generator=g, dtype=torch.float64) * spread).float()
    forward = torch.ops.tierkit._layer_norm_forward
    eps = 1e-12  # below the variance, so rstd shows it
    _, s_cpu = forward(x, None, None, eps)
    _, s_gpu = forward(x.cuda(), None, None, eps)
    s_gpu = s_gpu.cpu()
    ulp = 2.0**-10  # float32's spacing in [8192, 16384)
    mean64 = x.double().mean(-1)
    rstd64 = 1 / (x.double().var(-1, unbiased=False) + eps).sqrt()

    def rel(a, b):
        return ((a.double() - b.double()) / b.double()).abs().max().item()

    assert (s_gpu[:, 0].double() - s_cpu[:, 0].double()).abs().max().item() <= ulp
    assert (s_gpu[:, 0].double() - mean64).abs().max().item() <= ulp
    assert rel(s_gpu[:, 1], s_cpu[:, 1]) <= 1e-6
    assert rel(s_gpu[:, 1], rstd64) <= 1e-6


ALONG = [pytest.param(e, id=e.name) for e in ROW_REDUCTIONS if e.has_dim]


@pytest.mark.parametrize("entry", ALONG)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_along_any_dim_and_infinite_rows_match_the_cpu(entry, dtype, dim):
    """An entry along any dim on CUDA: as the CPU kernel within
    the dtype's tolerance, the same NaNs and infinities on rows holding -inf
    (an all -inf row: NaN) and +inf, and the gradient along that dim."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(6, 40, 33, generator=g, dtype=torch.float64) * 3).to(dtype)
    x[0, 0, :] = float("-inf")
    x[1, 1, 3] = float("-inf")
    x[2, 2, 5] = float("inf")
    op = getattr(torch.ops.tierkit, entry.name)
    y_cpu, y_gpu = op(x, dim), op(x.cuda(), dim).cpu()
    assert torch.equal(y_gpu.isnan(), y_cpu.isnan()) and torch.equal(y_gpu.isinf(), y_cpu.isinf())
    torch.testing.assert_close(y_gpu, y_cpu, rtol=tol(dtype) * 4, atol=tol(dtype) * 4, equal_nan=True)
    xf = (torch.randn(6, 40, 33, generator=g, dtype=torch.float64) * 3).to(dtype)
    dy = torch.randn(6, 40, 33, generator=g, dtype=torch.float64).to(dtype)
    grads = []
    for dev in ("cpu", "cuda"):
        xd = xf.to(dev).requires_grad_()
        (gx,) = torch.autograd.grad(op(xd, dim), (xd,), dy.to(dev))
        grads.append(gx.cpu())
    scale = max(1.0, grads[0].double().abs().max().item())
    torch.testing.assert_close(grads[1], grads[0], rtol=tol(dtype) * 16, atol=tol(dtype) * 16 * scale)
