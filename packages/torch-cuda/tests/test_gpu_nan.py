"""NaN outputs of every CUDA kernel in 16-bit (#51 item 10), against the CPU
op on the same input: NaN where the CPU's output is NaN, and with the bits
device_math.cuh documents. A NaN made by the GPU's arithmetic has no payload
(the GPU's one float NaN, 0x7fffffff, whatever the operands'), stored as
core stores that float: bfloat16 0x7fff, float16 0x7e00 (CUDA's own
conversion gives float16 0x7fff); so its bits are not the CPU's, which keeps
an operand's sign and payload. What is copied, not computed (rotary's
columns past r), keeps its bits exactly, signalling NaNs included. Non-NaN
outputs: the rotary's bit for bit, the others within the tolerances of
their own tests. The conversions themselves are checked against core's
over every input without a GPU (test_half_bits.py). Skipped without a CUDA
device."""

import pytest
import torch
from conftest import gpu, last
from tierkit_core.op_table import ROW_MAPS, ROW_REDUCTIONS
from tierkit_torch_common import testing
from tierkit_torch_common.map_suite import rope_tables
from tierkit_torch_common.testing import ARITY, tolerance

pytestmark = gpu
HALVES = [torch.bfloat16, torch.float16]
# What a computed NaN is stored as (core's store of the GPU's 0x7fffffff).
CANONICAL = {torch.bfloat16: 0x7FFF, torch.float16: 0x7E00}
# NaN inputs: both signs, quiet and signalling, assorted payloads.
PATTERNS = {
    torch.bfloat16: [0x7FC0, 0xFFC0, 0x7FC1, 0xFFA5, 0x7F81, 0xFF81],
    torch.float16: [0x7E00, 0xFE00, 0x7E01, 0xFD55, 0x7C01, 0xFC01],
}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


def with_nans(x: torch.Tensor, g: torch.Generator, share: float = 0.05) -> torch.Tensor:
    """x with about `share` of its elements replaced by the dtype's NaN patterns."""
    raw = x.contiguous().view(torch.int16).clone().view(-1)
    k = max(1, int(raw.numel() * share))
    where = torch.randperm(raw.numel(), generator=g)[:k]
    pats = torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in PATTERNS[x.dtype]], dtype=torch.int16)
    raw[where] = pats[torch.arange(k) % len(pats)]
    return raw.view(x.shape).view(x.dtype)


def nan_rows(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """x with one NaN pattern at a random column of every third row."""
    raw = x.contiguous().view(torch.int16).clone()
    pats = [p - 0x10000 if p >= 0x8000 else p for p in PATTERNS[x.dtype]]
    for i, row in enumerate(range(0, x.shape[0], 3)):
        raw[row, int(torch.randint(x.shape[1], (1,), generator=g))] = pats[i % len(pats)]
    return raw.view(x.dtype)


def check_nans(got: torch.Tensor, want: torch.Tensor, dtype, computed=None):
    """got (GPU) NaN exactly where want (CPU) is; its NaNs, where `computed`
    (default: everywhere), the canonical bits, elsewhere want's bits."""
    got = got.detach().cpu()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), "NaN positions differ from the CPU's"
    assert nan.any(), "the input put no NaN in the output"
    computed = torch.ones_like(nan) if computed is None else computed
    g, w = bits(got), bits(want)
    made = nan & computed
    bad = g[made] != CANONICAL[dtype]
    assert not bad.any(), f"computed NaNs {sorted({hex(v) for v in g[made][bad].tolist()})[:8]}"
    copied = nan & ~computed
    assert torch.equal(g[copied], w[copied]), "copied NaNs lost their bits"
    return nan


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in ROW_MAPS])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
def test_row_map_nans(entry, dtype, interleaved):
    g = torch.Generator().manual_seed(0)
    q = with_nans(torch.randn(2, 8, 33, 64, generator=g).to(dtype), g)
    cos, sin = (t.reshape(1, 1, 33, 48) for t in rope_tables(33, 48, dtype, interleaved))  # r = 48 < 64
    op = getattr(torch.ops.tierkit, entry.name)
    computed = torch.zeros(q.shape, dtype=torch.bool)
    computed[..., :48] = True
    y_cpu = op(q, cos, sin, interleaved)
    y_gpu = op(q.cuda(), cos.cuda(), sin.cuda(), interleaved)
    nan = check_nans(y_gpu, y_cpu, dtype, computed)
    assert torch.equal(bits(y_gpu)[~nan], bits(y_cpu)[~nan])  # the rest bit for bit
    # The transposed map (x's gradient), from a gradient holding NaNs.
    dy = with_nans(torch.randn(q.shape, generator=g).to(dtype), g)
    x = torch.randn(q.shape, generator=g).to(dtype)
    grads = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev).requires_grad_()
        (gx,) = torch.autograd.grad(op(xd, cos.to(dev), sin.to(dev), interleaved), (xd,), dy.to(dev))
        grads.append(gx)
    nan = check_nans(grads[1], grads[0], dtype, computed)
    assert torch.equal(bits(grads[1])[~nan], bits(grads[0])[~nan])


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in ROW_REDUCTIONS])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("d", [128, 1000, 4096], ids=str)  # warp rows (vector, scalar), block rows
def test_row_reduction_nans(entry, dtype, d):
    g = torch.Generator().manual_seed(1)
    x = nan_rows(torch.randn(16, d, generator=g).to(dtype), g)  # those rows' outputs are NaN
    params = [(1 + 0.5 * torch.randn(d, generator=g)).to(dtype) for _ in entry.params]
    op = getattr(torch.ops.tierkit, entry.name)
    y_cpu = op(x, *params, last(entry))
    y_gpu = op(x.cuda(), *[p.cuda() for p in params], last(entry))
    nan = check_nans(y_gpu, y_cpu, dtype)
    assert nan[::3].all() and not nan[1::3].any()
    # Backward: dx from a clean x and a dy holding NaNs.
    xc = torch.randn(16, d, generator=g).to(dtype)
    dy = nan_rows(torch.randn(16, d, generator=g).to(dtype), g)
    grads = []
    for dev in ("cpu", "cuda"):
        xd = xc.to(dev).requires_grad_()
        (gx,) = torch.autograd.grad(op(xd, *[p.to(dev) for p in params], last(entry)), (xd,), dy.to(dev))
        grads.append(gx)
    check_nans(grads[1], grads[0], dtype)
    if entry.fused_add:  # h = x + residual, computed and stored by the fused forward
        fused = getattr(torch.ops.tierkit, f"add_{entry.name}")
        r = torch.randn(16, d, generator=g).to(dtype)
        y_cpu, h_cpu = fused(x, r, *params, 1e-5)
        y_gpu, h_gpu = fused(x.cuda(), r.cuda(), *[p.cuda() for p in params], 1e-5)
        check_nans(h_gpu, h_cpu, dtype)
        check_nans(y_gpu, y_cpu, dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("op", list(ARITY))
def test_pointwise_nans(op, dtype):
    g = torch.Generator().manual_seed(2)
    for layout in ("contiguous", "misaligned", "transposed"):  # vector, scalar and strided loops
        inputs = []
        for _ in range(ARITY[op]):
            t = with_nans(torch.randn(1025, 40, generator=g).to(dtype), g)
            t = {"contiguous": t, "misaligned": t.view(-1)[1:], "transposed": t.t()}[layout]
            inputs.append(t)
        want = testing.call("tierkit", op, *inputs)
        got = testing.call("tierkit", op, *[t.cuda() for t in inputs])
        nan = check_nans(got, want, dtype)
        torch.testing.assert_close(got.cpu()[~nan], want[~nan], **tolerance(op, dtype))
