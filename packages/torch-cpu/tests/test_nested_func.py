"""Second-order torch.func through tierkit::'s C++ autograd nodes, every kind:
each row reduction (and its casting modes, composites over it), each row map
and each pointwise op of the op table, against the same function written with
aten's elementary ops (the entry's formula: torch 2.14's own F.layer_norm is
wrong under jacfwd(jacfwd), O(1) off its hessian, so it is not the
reference for the row reductions). Nested transforms reach an op's building blocks (the row
reductions' _<name>_forward) at the outer level, which must differentiate
them rather than cut or refuse them: hessian was off by O(1) before, with no
error (issue 51, item 1). tierkit_stable:: refuses torch.func clearly (its
autograd is Python's); its suite tests the refusal."""

import pytest
import torch
import torch.nn.functional as F
from tierkit_core.op_table import CASTING_MODES, ROW_MAPS, ROW_REDUCTIONS
from tierkit_torch_common.casting_suite import FORMULAS as CASTING_FORMULAS
from tierkit_torch_common.casting_suite import offset_of
from tierkit_torch_common.map_suite import eager as rotary_eager
from tierkit_torch_common.map_suite import rope_tables
from tierkit_torch_common.row_suite import aten, last, make, make_params
from tierkit_torch_common.rows import reference

# Every pair of differentiating transforms: reverse over reverse, forward over
# reverse (hessian), forward over forward, reverse over forward.
NESTINGS = {
    "hessian": lambda f: torch.func.hessian(f),
    "jacrev(jacrev)": lambda f: torch.func.jacrev(torch.func.jacrev(f)),
    "jacfwd(jacfwd)": lambda f: torch.func.jacfwd(torch.func.jacfwd(f)),
    "jacrev(jacfwd)": lambda f: torch.func.jacrev(torch.func.jacfwd(f)),
    "jacfwd(grad)": lambda f: torch.func.jacfwd(torch.func.grad(f)),
    "grad(grad)": lambda f: torch.func.grad(lambda a: torch.func.grad(f)(a).sin().sum()),
}
NESTED = pytest.mark.parametrize("nesting", list(NESTINGS), ids=list(NESTINGS))


def second_order(nesting, ours, theirs, x):
    got, want = NESTINGS[nesting](ours)(x), NESTINGS[nesting](theirs)(x)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@NESTED
@pytest.mark.parametrize("entry", ROW_REDUCTIONS, ids=[e.name for e in ROW_REDUCTIONS])
@pytest.mark.parametrize("wrt", ["x", "params"])
def test_row_reductions_second_order(nesting, entry, wrt, gen):
    x = make((2, 5), torch.float64, gen)
    params = make_params(entry, 5, torch.float64, gen)
    op = getattr(torch.ops.tierkit, entry.name)
    if wrt == "params" and not params:
        pytest.skip(f"{entry.name} has no parameters")
    if wrt == "x":
        second_order(
            nesting,
            lambda a: (op(a, *params, last(entry, 1e-5)) ** 2).sum(),
            lambda a: (reference(torch, entry, a, params, 1e-5) ** 2).sum(),
            x,
        )
    else:  # every parameter at once, flattened into one input
        flat = torch.cat(params)

        def split(v):
            return list(v.split([p.numel() for p in params]))

        second_order(
            nesting,
            lambda v: (op(x, *split(v), 1e-5) ** 3).sum(),
            lambda v: (reference(torch, entry, x, split(v), 1e-5) ** 3).sum(),
            flat,
        )


CASTING = [(e, m.name) for e in ROW_REDUCTIONS if e.casting for m in CASTING_MODES]


@NESTED
@pytest.mark.parametrize("entry, mode", CASTING, ids=[f"{e.name}-{m}" for e, m in CASTING])
def test_casting_modes_second_order(nesting, entry, mode, gen):
    x = make((2, 5), torch.float64, gen)
    w = make_params(entry, 5, torch.float64, gen)[0]
    offset = offset_of(mode)
    op = getattr(torch.ops.tierkit, entry.name).casting
    formula = CASTING_FORMULAS[mode]
    second_order(
        nesting,
        lambda a: (op(a, w, 1e-5, offset=offset, casting_mode=mode) ** 2).sum(),
        lambda a: (formula(a, w, 1e-5, offset) ** 2).sum(),
        x,
    )


@NESTED
@pytest.mark.parametrize("entry", ROW_MAPS, ids=[e.name for e in ROW_MAPS])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("wrt", ["x", "cos"])
def test_row_maps_second_order(nesting, entry, interleaved, wrt, gen):
    x = make((1, 2, 3, 8), torch.float64, gen)
    cos, sin = rope_tables(3, 8, torch.float64, interleaved)
    op = getattr(torch.ops.tierkit, entry.name)
    if wrt == "x":
        ours = lambda a: (op(a, cos, sin, interleaved) ** 2 * a).sum()  # noqa: E731
        theirs = lambda a: (rotary_eager(a, cos, sin, interleaved) ** 2 * a).sum()  # noqa: E731
        second_order(nesting, ours, theirs, x)
    else:  # the tables' derivatives (cos is a parameter of a learned rotary)
        ours = lambda c: (op(x, c, sin, interleaved) ** 2 * c.sum()).sum()  # noqa: E731
        theirs = lambda c: (rotary_eager(x, c, sin, interleaved) ** 2 * c.sum()).sum()  # noqa: E731
        second_order(nesting, ours, theirs, cos)


@NESTED
def test_pointwise_second_order(nesting, gen):
    g, u = make((2, 4), torch.float64, gen), make((2, 4), torch.float64, gen)
    second_order(
        nesting,
        lambda a: (torch.ops.tierkit.silu_mul(a, u) ** 2).sum(),
        lambda a: ((F.silu(a) * u) ** 2).sum(),
        g,
    )
    second_order(
        nesting,
        lambda a: (torch.ops.tierkit.gelu_tanh_mul(g, a) * a).sum(),
        lambda a: (F.gelu(g, approximate="tanh") * a * a).sum(),
        u,
    )


def test_the_forward_building_block_differentiates_y_not_its_stats(gen):
    """What nesting needs: _<name>_forward's y carries the op's derivatives;
    its stats are not differentiable, as aten's native_layer_norm's mean and
    rstd are not."""
    x = make((3, 6), torch.float64, gen).requires_grad_()
    w = make((6,), torch.float64, gen).requires_grad_()
    y, stats = torch.ops.tierkit._rms_norm_forward(x, w, 1e-6)
    assert not stats.requires_grad
    entry = next(e for e in ROW_REDUCTIONS if e.name == "rms_norm")
    want = aten(entry, x, [w], 1e-6)
    torch.testing.assert_close(y, want)
    got = torch.autograd.grad((y * y).sum(), (x, w))
    expected = torch.autograd.grad((want * want).sum(), (x, w))
    torch.testing.assert_close(got, expected)
    _, _, rstd = torch.native_layer_norm(x, (6,), w, None, 1e-6)
    assert not rstd.requires_grad  # aten's precedent
