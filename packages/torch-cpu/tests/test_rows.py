"""The row reductions in the tierkit namespace, every ROW_REDUCTIONS entry of
the op table: torch-common's shared row suite (values and accuracy per dtype,
mixed dtypes, errors real and fake, both autograd modes, vmap, compile,
opcheck, the fused residual form), plus what only this tier has: the
modules (tierkit_torch.RMSNorm, LayerNorm) as drop-ins for torch.nn's, their
TorchScript and export, and the autograd node's name."""

import pytest
import tierkit_torch
import torch
from tierkit_core.op_table import ROW_REDUCTIONS
from tierkit_torch_common.row_suite import *  # noqa: F403  (the shared tests, collected here)
from tierkit_torch_common.row_suite import ENTRIES, aten, last, make, make_params

MODULES = [e for e in ROW_REDUCTIONS if e.module]
WITH_MODULE = pytest.mark.parametrize("entry", MODULES, ids=[e.name for e in MODULES])


@pytest.fixture
def ops():
    return torch.ops.tierkit


@ENTRIES
def test_grad_fn_is_named_like_aten(entry, gen):
    x = make((2, 3), torch.float32, gen).requires_grad_()
    assert getattr(torch.ops.tierkit, entry.name)(x).grad_fn.name() == entry.node_name


@ENTRIES
def test_jvp_and_hessian_match_aten(entry, gen):
    x = make((2, 5), torch.float64, gen)
    params = make_params(entry, 5, torch.float64, gen)
    tangents = (torch.randn_like(x), *(torch.randn_like(p) for p in params))
    f = getattr(torch.ops.tierkit, entry.name)
    ours = torch.func.jvp(lambda a, *ps: f(a, *ps, last(entry, 1e-5)), (x, *params), tangents)
    theirs = torch.func.jvp(lambda a, *ps: aten(entry, a, ps, 1e-5), (x, *params), tangents)
    torch.testing.assert_close(ours, theirs)
    h_ours = torch.func.hessian(lambda a: f(a, *params, last(entry, 1e-5)).sum())(x)
    h_aten = torch.func.hessian(lambda a: aten(entry, a, params, 1e-5).sum())(x)
    torch.testing.assert_close(h_ours, h_aten)


def module_pair(entry, gen, d=24, **kwargs):
    ours = getattr(tierkit_torch, entry.module)(d, eps=1e-6, **kwargs)
    theirs = getattr(torch.nn, entry.module)(d, eps=1e-6, **kwargs)
    with torch.no_grad():
        for name, p in zip(entry.params, make_params(entry, d, torch.float32, gen)):
            if getattr(theirs, name, None) is not None:
                getattr(theirs, name).copy_(p)
    return ours, theirs


@WITH_MODULE
def test_module_is_a_drop_in_for_torchs(entry, gen):
    ours, theirs = module_pair(entry, gen)
    ours.load_state_dict(theirs.state_dict())
    x = make((3, 5, 24), torch.float32, gen)
    torch.testing.assert_close(ours(x), theirs(x))
    theirs.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == set(theirs.state_dict()) == set(entry.params)
    cls = getattr(tierkit_torch, entry.module)
    plain = cls((24,), elementwise_affine=False)
    assert not list(plain.parameters()) and all(getattr(plain, p) is None for p in entry.params)
    torch.testing.assert_close(plain(x), aten(entry, x, [None] * len(entry.params)))
    assert "eps=1e-06" in repr(ours)
    half = cls(24, dtype=torch.bfloat16)
    assert all(getattr(half, p).dtype == torch.bfloat16 for p in entry.params)
    assert half(x.bfloat16()).dtype == torch.bfloat16
    # float32 parameters under bfloat16 input (autocast's case): as torch's module.
    torch.testing.assert_close(ours(x.bfloat16()), theirs(x.bfloat16()))


def test_layer_norm_without_bias_is_torchs(gen):
    ours, theirs = module_pair(next(e for e in MODULES if "bias" in e.params), gen, bias=False)
    assert ours.bias is None and set(ours.state_dict()) == set(theirs.state_dict()) == {"weight"}
    ours.load_state_dict(theirs.state_dict())
    x = make((4, 24), torch.float32, gen)
    torch.testing.assert_close(ours(x), theirs(x))


@WITH_MODULE
def test_module_refuses_what_it_cannot_normalise(entry):
    cls = getattr(tierkit_torch, entry.module)
    with pytest.raises(ValueError, match=r"normalized_shape: expected one dimension .*got \(4, 8\)"):
        cls((4, 8))
    with pytest.raises(RuntimeError, match=r"input: expected a last dimension of 8 .*got shape \[3, 7\]"):
        cls(8)(torch.ones(3, 7))


class Along(torch.nn.Module):
    """An entry along a dim (no module of its own) as a module: the op along dim 1."""

    def __init__(self, entry):
        super().__init__()
        self.op = getattr(torch.ops.tierkit, entry.name)

    def forward(self, x):
        return self.op(x, 1)


@ENTRIES
def test_export_with_a_dynamic_batch(entry, gen):
    m = module_pair(entry, gen, d=16)[0] if entry.module else Along(entry)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(m, (make((4, 16), torch.float32, gen),), dynamic_shapes=({0: batch},))
    assert f"tierkit.{entry.name}" in str(ep.graph)  # the op itself, not a decomposition
    x = make((9, 16), torch.float32, gen)
    torch.testing.assert_close(ep.module()(x), m(x))


def test_aoti_runs_an_op_along_a_dim(gen, tmp_path):
    """AOTInductor: the first entry along a dim, along dim 1 of a dynamic batch, packaged and run, as eager gives it."""
    entry = next(e for e in ROW_REDUCTIONS if e.has_dim)
    m = Along(entry)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(m, (make((4, 16), torch.float32, gen),), dynamic_shapes=({0: batch},))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "along.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    x = make((7, 16), torch.float32, gen)
    assert torch.equal(runner(x), m(x))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@WITH_MODULE
@pytest.mark.parametrize("affine", [True, False])
def test_module_scripts_as_torchs_does(entry, affine, gen):
    ours, theirs = module_pair(entry, gen, elementwise_affine=affine)
    ours.load_state_dict(theirs.state_dict())
    scripted, reference = torch.jit.script(ours), torch.jit.script(theirs)
    x = make((3, 24), torch.float32, gen)
    assert torch.equal(scripted(x), ours(x))
    torch.testing.assert_close(scripted(x), reference(x))
    # TorchScript raises its own torch.jit.Error, carrying the module's message
    with pytest.raises(torch.jit.Error, match=r"input: expected a last dimension of 24"):
        scripted(torch.ones(3, 7))
