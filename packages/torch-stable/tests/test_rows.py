"""The row reductions on the stable tier, every ROW_REDUCTIONS entry of the op
table in tierkit_stable::: torch-common's shared row suite (values and
accuracy per dtype, mixed dtypes, errors real and fake, both autograd modes
from Python (the stable C++ API has none), vmap, compile, opcheck, the fused
residual form), plus what only this tier has: its building blocks refuse
differentiation, and torch.func's transforms are refused rather than
zeroed. Core's kernels are tierkit::'s, so the accuracy rules are too."""

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the ops)
import torch
from tierkit_torch_common.row_suite import *  # noqa: F403  (the shared tests, collected here)
from tierkit_torch_common.row_suite import ENTRIES, last, make, make_params


@pytest.fixture
def ops():
    return torch.ops.tierkit_stable


@ENTRIES
def test_building_blocks_are_not_differentiable(entry):
    x = torch.ones(3, 4, requires_grad=True)
    forward = getattr(torch.ops.tierkit_stable, entry.forward_name)
    with pytest.raises(RuntimeError, match=rf"tierkit_stable::{entry.forward_name}: not differentiable"):
        forward(x, *([None] * len(entry.params)), *([1e-6] if entry.has_eps else []))


@ENTRIES
def test_torch_func_differentiation_is_refused_not_zeroed(entry, gen):
    x = make((2, 5), torch.float64, gen)
    params = make_params(entry, 5, torch.float64, gen)
    f = getattr(torch.ops.tierkit_stable, entry.name)
    with pytest.raises(RuntimeError, match=rf"tierkit_stable::{entry.name}: torch.func transforms"):
        torch.func.jvp(lambda a: f(a, *params, last(entry, 1e-5)), (x,), (torch.ones_like(x),))
