"""The norms' casting modes (offset, casting_mode) in the tierkit namespace:
torch-common's shared casting suite, every entry with casting modes times
every mode, plus what only this tier has: the module's modes as drop-ins for
Hugging Face's norms, TorchScript, export and AOTInductor."""

import pytest
import tierkit_torch
import torch
from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS
from tierkit_torch_common.casting_suite import *  # noqa: F403  (the shared tests, collected here)
from tierkit_torch_common.casting_suite import CASTING, FORMULAS, offset_of, weight
from tierkit_torch_common.row_suite import make


@pytest.fixture
def ops():
    return torch.ops.tierkit


@CASTING
def test_casting_module_is_the_models_norm(entry, mode, gen):
    cls = getattr(tierkit_torch, entry.module)
    offset = offset_of(mode)
    m = cls(64, eps=1e-6, offset=offset, casting_mode=mode)
    # Starts as the plain norm: weight 1 - offset (in float32, the module's
    # dtype: Llama's mode gives result_type(weight, x), the values x-hat's).
    x = make((4, 64), torch.bfloat16, gen)
    plain = getattr(torch.ops.tierkit, entry.name)(x, None, 1e-6)
    torch.testing.assert_close(m(x).to(x.dtype), plain, rtol=0, atol=0)
    with torch.no_grad():
        m.weight.copy_(weight(64, torch.float32, gen, mode))
    want = FORMULAS[mode](x, m.weight, 1e-6, offset)
    got = m(x)
    assert got.dtype == want.dtype and (got == want).float().mean().item() >= 0.99
    assert f"casting_mode={mode}" in repr(m)
    scripted = torch.jit.script(m)
    torch.testing.assert_close(scripted(x), got, rtol=0, atol=0)
    with pytest.raises(ValueError, match="casting_mode: expected one of"):
        cls(8, casting_mode="Llama")


# Every mode in one exported module: one AOTInductor compile (~12 s of a
# core each) for the three, each output compared bit for bit.
@pytest.mark.parametrize("entry", [e for e in ROW_REDUCTIONS if e.casting], ids=lambda e: e.name)
def test_casting_export_and_aoti(entry, gen, tmp_path):
    modes = [m.name for m in CASTING_MODES]
    ws = [weight(32, torch.float32, gen, mode) for mode in modes]
    op = getattr(tierkit_torch, entry.name)

    class Block(torch.nn.Module):
        def forward(self, x):
            return tuple(
                op(x, w, 1e-6, offset=offset_of(mode), casting_mode=mode) for mode, w in zip(modes, ws)
            )

    x = make((3, 32), torch.bfloat16, gen)
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(Block(), (x,), dynamic_shapes=({0: batch},))
    x2 = make((7, 32), torch.bfloat16, gen)
    want = Block()(x2)
    assert len(want) == len(modes) >= 3
    torch.testing.assert_close(ep.module()(x2), want, rtol=0, atol=0)
    from torch._inductor import aoti_compile_and_package, aoti_load_package

    path = aoti_compile_and_package(ep, package_path=str(tmp_path / "casting.pt2"))
    got = aoti_load_package(path)(x2)
    for mode, g, w in zip(modes, got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=lambda m, mode=mode: f"casting_mode={mode}: {m}")
