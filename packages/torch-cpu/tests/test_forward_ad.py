"""Forward-mode AD through every tierkit op: torch.func.jvp, forward_ad duals,
jacfwd, hessian (forward-over-reverse) and gradcheck's forward check. A
missing or zero tangent would be a silently wrong derivative, so every case
compares against the same maths in plain torch."""

import pytest
import torch
from conftest import DTYPES
from reference import ARITY, call, composite
from torch.autograd import forward_ad as fwAD

OPS = list(ARITY)
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 1e-1}


def inputs_for(op, dtype, gen, n=7):
    return tuple(torch.randn(n, generator=gen, dtype=torch.float64).to(dtype) for _ in range(ARITY[op]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_jvp_matches_plain_torch(op, dtype, gen):
    primals = inputs_for(op, dtype, gen)
    tangents = inputs_for(op, dtype, gen)
    out, tangent = torch.func.jvp(lambda *x: call(op, *x), primals, tangents)
    ref_out, ref_tangent = torch.func.jvp(lambda *x: composite(op, *x), primals, tangents)
    assert tangent is not None and tangent.abs().sum() > 0
    torch.testing.assert_close(tangent, ref_tangent, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(out, ref_out, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("op", OPS)
def test_dual_tensors_carry_a_tangent_even_when_only_one_input_is_dual(op, gen):
    primals = inputs_for(op, torch.float64, gen)
    t = torch.randn(7, generator=gen, dtype=torch.float64)
    with fwAD.dual_level():
        for k in range(len(primals)):
            args = list(primals)
            args[k] = fwAD.make_dual(primals[k], t)
            got = fwAD.unpack_dual(call(op, *args)).tangent
            ref = fwAD.unpack_dual(composite(op, *args)).tangent
            assert got is not None, f"{op}: no tangent with input {k} dual"
            torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("op", OPS)
def test_jacfwd_equals_jacrev(op, gen):
    primals = inputs_for(op, torch.float64, gen, n=5)
    argnums = tuple(range(len(primals)))
    fwd = torch.func.jacfwd(lambda *x: call(op, *x), argnums=argnums)(*primals)
    rev = torch.func.jacrev(lambda *x: composite(op, *x), argnums=argnums)(*primals)
    for f, r in zip(fwd, rev):
        torch.testing.assert_close(f, r)


@pytest.mark.parametrize("op", OPS)
def test_hessian_forward_over_reverse(op, gen):
    primals = inputs_for(op, torch.float64, gen, n=4)

    def f(x):  # a scalar function of one input, the others fixed
        return (call(op, x, *primals[1:]) ** 2).sum()

    def g(x):
        return (composite(op, x, *primals[1:]) ** 2).sum()

    torch.testing.assert_close(torch.func.hessian(f)(primals[0]), torch.func.hessian(g)(primals[0]))


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_with_forward_ad(op, gen):
    primals = tuple(x.requires_grad_() for x in inputs_for(op, torch.float64, gen))
    assert torch.autograd.gradcheck(lambda *x: call(op, *x), primals, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda *x: call(op, *x), primals)


def test_writers_refuse_tangents_instead_of_dropping_them(gen):
    a, b = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    with fwAD.dual_level():
        d = fwAD.make_dual(a, torch.ones(3))
        with pytest.raises(RuntimeError, match="tierkit::add_out: .*forward-mode AD"):
            torch.ops.tierkit.add_out(d, b, torch.empty(3))
        with pytest.raises(RuntimeError, match="tierkit::mul.out: .*forward-mode AD"):
            torch.ops.tierkit.mul.out(d, b, out=torch.empty(3))


@pytest.mark.parametrize(
    ("op", "name"),
    [
        ("custom_add", "CustomAddBackward0"),
        ("mul", "MulBackward0"),
        ("scale_shift", "ScaleShiftBackward0"),
        ("muladd", "MulAddBackward0"),
    ],
)
def test_grad_fn_names_read_like_aten(op, name, gen):
    x = inputs_for(op, torch.float32, gen)
    x[0].requires_grad_()
    y = call(op, *x)
    assert y.grad_fn.name() == name  # what autograd's errors and graph printers show
