"""The row reductions on the stable tier (tierkit_stable::rms_norm,
add_rms_norm, add_rms_norm_ and their building blocks) against aten's
F.rms_norm and float64: values, errors (real and fake alike), autograd in
both modes (from Python: the stable C++ API has none), vmap, compile and
opcheck. Core's kernels are tierkit::'s, so the accuracy rules are too."""

import numpy as np
import pytest
import tierkit_torch_stable
import torch
import torch.nn.functional as F

ops = torch.ops.tierkit_stable
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def make(shape, dtype, gen, scale=3.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def reference(x, w, eps):
    """In x87 extended precision (numpy's longdouble): exact enough to judge float64 too."""
    xl = x.double().numpy().astype(np.longdouble)
    y = xl / np.sqrt((xl * xl).mean(-1, keepdims=True) + np.longdouble(eps))
    return torch.from_numpy((y * w.double().numpy().astype(np.longdouble)).astype(np.float64))


def err(y, ref):
    return (y.double() - ref).abs().max().item() if y.numel() else 0.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 64), (5, 1), (3, 4097)], ids=str)
def test_at_least_as_accurate_as_aten(shape, dtype, gen):
    x, w = make(shape, dtype, gen), make(shape[-1:], dtype, gen, 1.0)
    ref = reference(x, w, 1e-6)
    ours = ops.rms_norm(x, w, 1e-6)
    assert ours.dtype == dtype and ours.shape == x.shape and ours.is_contiguous()
    ulp = torch.finfo(dtype).eps * ref.abs().max().item()
    assert err(ours, ref) <= err(F.rms_norm(x, shape[-1:], w, 1e-6), ref) + ulp


def test_default_eps_empty_zero_and_strided_rows(gen):
    x = make((6, 16), torch.float32, gen) * 1e-4  # small rows, where eps matters
    torch.testing.assert_close(ops.rms_norm(x), F.rms_norm(x, (16,)), atol=0, rtol=2e-7)
    for shape in [(0, 4), (3, 0)]:
        assert ops.rms_norm(torch.zeros(shape)).shape == shape
    z = torch.zeros(3, 8)
    assert torch.equal(ops.rms_norm(z, torch.ones(8)), F.rms_norm(z, (8,), torch.ones(8)))
    t = make((16, 12), torch.float32, gen).t()
    torch.testing.assert_close(ops.rms_norm(t, None, 1e-6), F.rms_norm(t, (16,), None, 1e-6))


def test_bit_identical_for_one_and_two_threads(gen):
    x = make((64, 4097), torch.float32, gen).requires_grad_()
    w = make((4097,), torch.float32, gen, 1.0).requires_grad_()
    before, results = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            y = ops.rms_norm(x, w, 1e-6)
            results.append((y.detach(), *torch.autograd.grad(y, (x, w), torch.ones_like(y))))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*results))


ERRORS = [
    ((lambda d: (torch.tensor(1.0, device=d), None)), r"x: expected a tensor with at least one dimension"),
    ((lambda d: (torch.ones(3, 4, dtype=torch.int32, device=d), None)), r"x: expected dtype .*, got int32"),
    (
        (lambda d: (torch.ones(3, 4, device=d), torch.ones(5, device=d))),
        r"weight: expected shape \[4\] .*got \[5\]",
    ),
    (
        (lambda d: (torch.ones(3, 4, device=d), torch.ones(4, dtype=torch.int32, device=d))),
        r"weight: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_the_argument(case, device):
    make_args, pattern = ERRORS[case]
    with pytest.raises(RuntimeError, match=r"tierkit_stable::rms_norm: " + pattern):
        ops.rms_norm(*make_args(device))


def test_errors_with_grad_name_the_op_called():
    x = torch.ones(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"tierkit_stable::rms_norm: weight: expected shape \[4\]"):
        ops.rms_norm(x, torch.ones(5))
    with pytest.raises(
        RuntimeError, match=r"tierkit_stable::add_rms_norm: residual: expected shape \[3, 4\]"
    ):
        ops.add_rms_norm(x, torch.ones(3, 5))
    with pytest.raises(RuntimeError, match=r"tierkit_stable::_rms_norm_forward: not differentiable"):
        ops._rms_norm_forward(x, None, 1e-6)


@pytest.mark.parametrize("with_weight", [False, True])
def test_gradcheck_gradgradcheck_and_forward_ad(with_weight, gen):
    x = make((3, 7), torch.float64, gen).requires_grad_()
    w = make((7,), torch.float64, gen, 1.0).requires_grad_() if with_weight else None
    args = (x, w) if with_weight else (x,)

    def fn(*a):
        return ops.rms_norm(a[0], a[1] if with_weight else None, 1e-5)

    assert torch.autograd.gradcheck(fn, args, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_as_accurate_as_aten(dtype, gen):
    x, w = make((8, 64), dtype, gen).requires_grad_(), make((64,), dtype, gen, 1.0).requires_grad_()
    g = make((8, 64), dtype, gen, 1.0)
    ours = torch.autograd.grad(ops.rms_norm(x, w, 1e-6), (x, w), g)
    aten = torch.autograd.grad(F.rms_norm(x, (64,), w, 1e-6), (x, w), g)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.autograd.grad(F.rms_norm(x64, (64,), w64, 1e-6), (x64, w64), g.double())
    for o, a, r in zip(ours, aten, ref):
        assert err(o, r) <= err(a, r) + 2 * torch.finfo(dtype).eps * r.abs().max().item()


def test_torch_func_differentiation_is_refused_not_zeroed(gen):
    x, w = make((2, 5), torch.float64, gen), make((5,), torch.float64, gen, 1.0)
    with pytest.raises(RuntimeError, match=r"tierkit_stable::rms_norm: torch.func transforms"):
        torch.func.jvp(lambda a: ops.rms_norm(a, w, 1e-5), (x,), (torch.ones_like(x),))


@pytest.mark.parametrize("in_dims", [(0, None), (1, None), (0, 0), (None, 0)])
def test_vmap_without_fallback(in_dims, gen):
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        x = make((4, 3, 8), torch.float32, gen)
        if in_dims[0] is None:
            x = x[0]
        w = make((4 if in_dims[0] != 1 else 3, 8) if in_dims[1] == 0 else (8,), torch.float32, gen, 1.0)
        got = torch.vmap(lambda a, b: ops.rms_norm(a, b, 1e-6), in_dims=in_dims)(x, w)
        want = torch.vmap(lambda a, b: F.rms_norm(a, (8,), b, 1e-6), in_dims=in_dims)(x, w)
        torch.testing.assert_close(got, want)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


def test_compile_fullgraph_dynamic_forward_and_backward(gen):
    x, w = (
        make((6, 32), torch.float32, gen).requires_grad_(),
        make((32,), torch.float32, gen).requires_grad_(),
    )
    fn = torch.compile(lambda a, b: ops.rms_norm(a, b, 1e-6) * 2, fullgraph=True, dynamic=True)
    y = fn(x, w)
    torch.testing.assert_close(y, ops.rms_norm(x, w, 1e-6) * 2)
    got = torch.autograd.grad(y.sum(), (x, w))
    want = torch.autograd.grad((ops.rms_norm(x, w, 1e-6) * 2).sum(), (x, w))
    torch.testing.assert_close(got, want)
    x2 = make((10, 32), torch.float32, gen)
    torch.testing.assert_close(fn(x2, w), ops.rms_norm(x2, w, 1e-6) * 2)


@pytest.mark.parametrize(
    "name,args",
    [
        ("rms_norm", lambda g: (make((3, 8), torch.float32, g).requires_grad_(), None, 1e-5)),
        ("rms_norm", lambda g: (make((2, 3, 8), torch.float64, g), make((8,), torch.float64, g), None)),
        (
            "add_rms_norm",
            lambda g: (make((3, 8), torch.float32, g), make((3, 8), torch.float32, g), None, None),
        ),
        (
            "add_rms_norm",
            lambda g: (
                make((3, 8), torch.float32, g).requires_grad_(),
                make((3, 8), torch.float32, g),
                make((8,), torch.float32, g).requires_grad_(),
                1e-6,
            ),
        ),
        (
            "add_rms_norm_",
            lambda g: (make((3, 8), torch.float32, g), make((3, 8), torch.float32, g), None, None),
        ),
    ],
)
def test_opcheck(name, args, gen):
    result = torch.library.opcheck(getattr(ops, name).default, args(gen))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rms_norm_is_the_add_then_the_norm(dtype, gen):
    x, r, w = make((5, 40), dtype, gen), make((5, 40), dtype, gen), make((40,), dtype, gen, 1.0)
    y, h = ops.add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(h, x + r) and torch.equal(y, ops.rms_norm(x + r, w, 1e-6))
    xg, rg, wg = (t.double().requires_grad_() for t in (x, r, w))
    assert torch.autograd.gradcheck(
        lambda *a: ops.add_rms_norm(*a, 1e-5), (xg, rg, wg), check_forward_ad=True
    )


def test_add_rms_norm_in_place(gen):
    x, r, w = (
        make((4, 16), torch.float32, gen),
        make((4, 16), torch.float32, gen),
        make((16,), torch.float32, gen),
    )
    want_y, want_h = ops.add_rms_norm(x, r, w, 1e-6)
    version = r._version
    y = ops.add_rms_norm_(x, r, w, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(r, want_h) and r._version > version
    strided = torch.empty(16, 4).t()
    strided.copy_(want_h - x)
    ops.add_rms_norm_(x, strided, w, 1e-6)  # a strided residual is written in place
    torch.testing.assert_close(strided, want_h)
    with pytest.raises(RuntimeError, match=r"add_rms_norm_: residual: has internal overlap"):
        ops.add_rms_norm_(x, torch.zeros(16).expand(4, 16), w)
    with pytest.raises(RuntimeError, match=r"add_rms_norm_: residual: partially overlaps x"):
        big = torch.zeros(5, 16)
        ops.add_rms_norm_(big[:4], big[1:], w)
    with pytest.raises(RuntimeError, match=r"add_rms_norm_: writes into `residual` .*requires grad"):
        ops.add_rms_norm_(x.clone().requires_grad_(), r, w)


def test_add_rms_norm_in_place_is_functionalized_under_compile(gen):
    x, r = make((4, 16), torch.float32, gen), make((4, 16), torch.float32, gen)
    r2 = r.clone()
    step = torch.compile(
        lambda a, b: tierkit_torch_stable.ops.add_rms_norm_(a, b, None, 1e-6) * 2, fullgraph=True
    )
    torch.testing.assert_close(step(x, r), ops.add_rms_norm_(x, r2, None, 1e-6) * 2)
    torch.testing.assert_close(r, r2)
