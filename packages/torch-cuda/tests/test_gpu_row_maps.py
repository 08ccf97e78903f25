"""GPU tests of every row map of the op table (ROW_MAPS: rotary embeddings,
the kind's CUDA kernel) and of the norms' casting modes on CUDA tensors,
table-driven: against the CPU kernels bit for bit (the same roundings:
products then their sum, no FMA) and the models' own code, both layouts,
broadcast tables, gradients, compile. Skipped without a CUDA device."""

import pytest
import torch
from conftest import DTYPES, gpu
from tierkit_core.op_table import CASTING_MODES, ROW_MAPS, ROW_REDUCTIONS
from tierkit_torch_common.casting_suite import FORMULAS
from tierkit_torch_common.map_suite import eager, rope_tables

pytestmark = gpu
MAPS = [pytest.param(e, id=e.name) for e in ROW_MAPS]
CASTING = [
    pytest.param(e, m.name, id=f"{e.name}-{m.name}")
    for e in ROW_REDUCTIONS
    if e.casting
    for m in CASTING_MODES
]


@pytest.mark.parametrize("entry", MAPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
def test_map_matches_the_cpu_and_the_models_code(entry, dtype, interleaved):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 33, 64, generator=g).to(dtype)
    cos, sin = (t.reshape(1, 1, 33, 48) for t in rope_tables(33, 48, dtype, interleaved))  # partial width
    op = getattr(torch.ops.tierkit, entry.name)
    y_cpu = op(q, cos, sin, interleaved)
    y_gpu = op(q.cuda(), cos.cuda(), sin.cuda(), interleaved)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, rtol=0, atol=0)
    if dtype in (torch.float32, torch.float64):
        torch.testing.assert_close(y_gpu.cpu(), eager(q, cos, sin, interleaved), rtol=0, atol=0)
    qg = q.cuda().requires_grad_()
    dy = torch.randn(q.shape, generator=g).to(dtype)
    (gx,) = torch.autograd.grad(op(qg, cos.cuda(), sin.cuda(), interleaved), (qg,), dy.cuda())
    qc = q.clone().requires_grad_()
    (cx,) = torch.autograd.grad(op(qc, cos, sin, interleaved), (qc,), dy)
    torch.testing.assert_close(gx.cpu(), cx, rtol=0, atol=0)


@pytest.mark.parametrize("entry", MAPS)
def test_map_compile_fullgraph_dynamic(entry):
    q = torch.randn(2, 4, 16, 32, device="cuda")
    cos, sin = (t.reshape(1, 1, 16, 32).cuda() for t in rope_tables(16, 32, torch.float32))
    op = getattr(torch.ops.tierkit, entry.name)
    f = torch.compile(lambda a: op(a, cos, sin, False) * 2, fullgraph=True, dynamic=True)
    torch.testing.assert_close(f(q), op(q, cos, sin, False) * 2)


@pytest.mark.parametrize(("entry", "mode"), CASTING)
def test_casting_modes_match_the_cpu(entry, mode):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 512, generator=g).bfloat16()
    w = (torch.randn(512, generator=g) * 0.3).float()
    offset = 1.0 if mode == "gemma" else 0.0
    op = getattr(torch.ops.tierkit, entry.name)
    y_gpu = op(x.cuda(), w.cuda(), 1e-6, offset=offset, casting_mode=mode)
    want = FORMULAS[mode](x.cuda(), w.cuda(), 1e-6, offset)
    assert y_gpu.dtype == want.dtype
    assert (y_gpu == want).float().mean().item() >= 0.99
