"""GPU tests of the in-place row ops (ROW_IN_PLACE: vLLM's cached rotary
embedding) against the CPU kernel: the same bits in every dtype (one
thread a pair, each product and the sum rounded as on the CPU), the layouts
vLLM passes, a bad position refused with nothing written. Skipped without a
CUDA device."""

import pytest
import torch
from conftest import DTYPES, gpu
from tierkit_core.op_table import ROW_IN_PLACE
from tierkit_torch_common.in_place_suite import make_case

pytestmark = gpu
ENTRIES = [pytest.param(e, id=e.name) for e in ROW_IN_PLACE]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rot", [32, 16], ids=["full", "partial"])
def test_matches_the_cpu_bit_for_bit(entry, dtype, neox, rot):
    g = torch.Generator().manual_seed(0)
    positions, query, key, cache = make_case(dtype, g, tokens=(3, 5), rot=rot)
    op = getattr(torch.ops.tierkit, entry.name)
    q, k = query.clone(), key.clone()
    qc, kc = query.cuda(), key.cuda()
    with torch.no_grad():
        op(positions, q, k, cache, 32, neox)
        op(positions.cuda(), qc, kc, cache.cuda(), 32, neox)
    assert torch.equal(qc.cpu(), q) and torch.equal(kc.cpu(), k)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_fused_qkv_row_and_a_bad_position(entry):
    g = torch.Generator().manual_seed(1)
    positions, query, key, cache = make_case(torch.bfloat16, g, cache_dtype=torch.float32)
    op = getattr(torch.ops.tierkit, entry.name)
    qkv = torch.cat((query, key, torch.ones(7, 64, dtype=torch.bfloat16)), -1).cuda()
    q, k = query.clone(), key.clone()
    with torch.no_grad():
        op(positions, q, k, cache, 32, True)
        op(positions.cuda(), qkv[:, :128], qkv[:, 128:192], cache.cuda(), 32, True)
    assert torch.equal(qkv[:, :128].cpu(), q) and torch.equal(qkv[:, 128:192].cpu(), k)
    assert (qkv[:, 192:] == 1).all()
    bad = positions.cuda()
    bad[4] = 64
    before = qkv.clone()
    with pytest.raises(
        RuntimeError, match=r"positions\[4\]: expected a row of cos_sin_cache, in \[0, 64\), got 64"
    ):
        with torch.no_grad():
            op(bad, qkv[:, :128], None, cache.cuda(), 32, True)
    assert torch.equal(qkv, before)
