"""The row maps (rotary embeddings) in the tierkit namespace: torch-common's
shared map suite (values against the models' own code per dtype and layout,
mixed dtypes, errors real and fake, both autograd modes, vmap, compile,
opcheck), plus what only this tier has: export with a dynamic batch and
AOTInductor, and DTensor (tests/test_distributed.py)."""

import pytest
import tierkit_torch
import torch
from tierkit_torch_common.map_suite import *  # noqa: F403  (the shared tests, collected here)
from tierkit_torch_common.map_suite import MAPS, eager, rope_tables
from tierkit_torch_common.row_suite import make


@pytest.fixture
def ops():
    return torch.ops.tierkit


@MAPS
def test_map_export_and_aoti(entry, gen, tmp_path):
    cos, sin = (t.reshape(1, 1, 6, 16) for t in rope_tables(6, 16, torch.bfloat16))

    class Block(torch.nn.Module):
        def forward(self, q, k):
            f = getattr(tierkit_torch, entry.name)
            return f(q, cos, sin), f(k, cos, sin)

    q, k = make((2, 4, 6, 16), torch.bfloat16, gen, 1.0), make((2, 2, 6, 16), torch.bfloat16, gen, 1.0)
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(Block(), (q, k), dynamic_shapes=({0: batch}, {0: batch}))
    q2, k2 = make((5, 4, 6, 16), torch.bfloat16, gen, 1.0), make((5, 2, 6, 16), torch.bfloat16, gen, 1.0)
    want = Block()(q2, k2)
    torch.testing.assert_close(ep.module()(q2, k2), want, rtol=0, atol=0)
    torch.testing.assert_close(
        want[0].float(), eager(q2.float(), cos.float(), sin.float()), atol=2e-2, rtol=1e-2
    )
    from torch._inductor import aoti_compile_and_package, aoti_load_package

    path = aoti_compile_and_package(ep, package_path=str(tmp_path / "rope.pt2"))
    torch.testing.assert_close(aoti_load_package(path)(q2, k2), want, rtol=0, atol=0)
