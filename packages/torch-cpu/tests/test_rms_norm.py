"""rms_norm, add_rms_norm, add_rms_norm_ and RMSNorm against aten's F.rms_norm
and float64: values and accuracy, errors (fake and real alike), autograd in
both modes, vmap, compile and export, determinism, the module's state dict."""

import numpy as np
import pytest
import tierkit_torch
import torch
import torch.nn.functional as F
from torch.func import jvp, vmap

ops = torch.ops.tierkit
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SHAPES = [(4, 33), (2, 3, 64), (5, 1), (7, 4097)]


def make(shape, dtype, gen, scale=3.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def reference(x, weight=None, eps=None):
    """In x87 extended precision (numpy's longdouble): exact enough to judge
    float64 too. Returned as float64."""
    eps = (
        eps
        if eps is not None
        else torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
    )
    xl = x.double().numpy().astype(np.longdouble)
    y = xl / np.sqrt((xl * xl).mean(-1, keepdims=True) + np.longdouble(eps))
    if weight is not None:
        y = y * weight.double().numpy().astype(np.longdouble)
    return torch.from_numpy(y.astype(np.float64))


def max_err(y, ref):
    return (y.double() - ref).abs().max().item() if y.numel() else 0.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_weight", [False, True])
def test_at_least_as_accurate_as_aten(shape, dtype, with_weight, gen):
    x = make(shape, dtype, gen)
    w = make(shape[-1:], dtype, gen, 1.0) if with_weight else None
    ref = reference(x, w, 1e-6)
    ours = ops.rms_norm(x, w, 1e-6)
    aten = F.rms_norm(x, shape[-1:], w, 1e-6)
    assert ours.dtype == dtype and ours.shape == x.shape and ours.is_contiguous()
    ulp = torch.finfo(dtype).eps * ref.abs().max().item()
    assert max_err(ours, ref) <= max_err(aten, ref) + ulp, (max_err(ours, ref), max_err(aten, ref))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_default_eps_is_torchs(dtype, gen):
    x = make((6, 16), dtype, gen) * 1e-4  # small rows, where eps matters
    torch.testing.assert_close(ops.rms_norm(x), F.rms_norm(x, (16,)), atol=0, rtol=2 * torch.finfo(dtype).eps)


def test_empty_and_zero_rows_match_aten():
    for shape in [(0, 4), (3, 0), (2, 0, 5)]:
        x = torch.zeros(shape)
        assert ops.rms_norm(x).shape == F.rms_norm(x, shape[-1:]).shape
    z = torch.zeros(3, 8)
    assert torch.equal(ops.rms_norm(z, torch.ones(8)), F.rms_norm(z, (8,), torch.ones(8)))


def test_non_contiguous_input(gen):
    x = make((16, 12), torch.float32, gen).t()  # [12, 16], strided
    torch.testing.assert_close(ops.rms_norm(x, None, 1e-6), F.rms_norm(x, (16,), None, 1e-6))


def test_bit_identical_for_one_and_two_threads(gen):
    x = make((64, 4097), torch.float32, gen)
    w = make((4097,), torch.float32, gen, 1.0).requires_grad_()
    x.requires_grad_()
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            y = ops.rms_norm(x, w, 1e-6)
            gx, gw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
            results.append((y.detach(), gx, gw))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results):
        assert torch.equal(a, b)


# ---- errors: the real and the fake kernel say the same ---------------------------


ERRORS = [
    (lambda d: (torch.tensor(1.0, device=d), None), r"x: expected a tensor with at least one dimension"),
    (lambda d: (torch.ones(3, 4, dtype=torch.int32, device=d), None), r"x: expected dtype .*, got int32"),
    (
        lambda d: (torch.ones(3, 4, device=d), torch.ones(5, device=d)),
        r"weight: expected shape \[4\] .*got \[5\]",
    ),
    (lambda d: (torch.ones(3, 4, device=d), torch.ones(2, 2, device=d)), r"weight: expected shape \[4\]"),
    (
        lambda d: (torch.ones(3, 4, device=d), torch.ones(4, dtype=torch.int32, device=d)),
        r"weight: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_the_argument(case, device):
    make_args, pattern = ERRORS[case]
    x, w = make_args(device)
    with pytest.raises(RuntimeError, match=r"tierkit::rms_norm: " + pattern):
        ops.rms_norm(x, w)


def test_errors_with_grad_name_the_op_called():
    x = torch.ones(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"tierkit::rms_norm: weight: expected shape \[4\]"):
        ops.rms_norm(x, torch.ones(5))
    with pytest.raises(RuntimeError, match=r"tierkit::add_rms_norm: residual: expected shape \[3, 4\]"):
        ops.add_rms_norm(x, torch.ones(3, 5))


# ---- autograd -----------------------------------------------------------------------


@pytest.mark.parametrize("with_weight", [False, True])
def test_gradcheck_and_gradgradcheck(with_weight, gen):
    x = make((3, 7), torch.float64, gen).requires_grad_()
    w = make((7,), torch.float64, gen, 1.0).requires_grad_() if with_weight else None
    args = (x, w) if with_weight else (x,)

    def fn(*a):
        return ops.rms_norm(a[0], a[1] if with_weight else None, 1e-5)

    assert torch.autograd.gradcheck(fn, args, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_as_accurate_as_aten(dtype, gen):
    x = make((8, 64), dtype, gen).requires_grad_()
    w = make((64,), dtype, gen, 1.0).requires_grad_()
    g = make((8, 64), dtype, gen, 1.0)
    ours = torch.autograd.grad(ops.rms_norm(x, w, 1e-6), (x, w), g)
    aten = torch.autograd.grad(F.rms_norm(x, (64,), w, 1e-6), (x, w), g)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.autograd.grad(F.rms_norm(x64, (64,), w64, 1e-6), (x64, w64), g.double())
    for o, a, r in zip(ours, aten, ref):
        ulp = torch.finfo(dtype).eps * r.abs().max().item()
        assert max_err(o, r) <= max_err(a, r) + 2 * ulp, (max_err(o, r), max_err(a, r))


def test_jvp_and_hessian_match_aten(gen):
    x = make((2, 5), torch.float64, gen)
    w = make((5,), torch.float64, gen, 1.0)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    ours = jvp(lambda a, b: ops.rms_norm(a, b, 1e-5), (x, w), (tx, tw))
    aten = jvp(lambda a, b: F.rms_norm(a, (5,), b, 1e-5), (x, w), (tx, tw))
    torch.testing.assert_close(ours, aten)
    h_ours = torch.func.hessian(lambda a: ops.rms_norm(a, w, 1e-5).sum())(x)
    h_aten = torch.func.hessian(lambda a: F.rms_norm(a, (5,), w, 1e-5).sum())(x)
    torch.testing.assert_close(h_ours, h_aten)


def test_grad_fn_is_named_like_aten(gen):
    x = make((2, 3), torch.float32, gen).requires_grad_()
    assert ops.rms_norm(x).grad_fn.name() == "RmsNormBackward0"


# ---- vmap ---------------------------------------------------------------------------


@pytest.mark.parametrize("in_dims", [(0, None), (1, None), (0, 0), (None, 0)])
def test_vmap_without_fallback(in_dims, gen):
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        x = make((4, 3, 8), torch.float32, gen)
        w = make((8,), torch.float32, gen, 1.0)
        if in_dims[0] is None:
            x = x[0]
        if in_dims[1] == 0:
            w = make((4 if in_dims[0] != 1 else 3, 8), torch.float32, gen, 1.0)
        got = vmap(lambda a, b: ops.rms_norm(a, b, 1e-6), in_dims=in_dims)(x, w)
        want = vmap(lambda a, b: F.rms_norm(a, (8,), b, 1e-6), in_dims=in_dims)(x, w)
        torch.testing.assert_close(got, want)
        gx = vmap(torch.func.grad(lambda a: ops.rms_norm(a, w if in_dims[1] is None else None, 1e-6).sum()))(
            x if in_dims[0] is not None else x.expand(4, 3, 8)
        )
        assert gx.shape[-1] == 8
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


# ---- compile and export ---------------------------------------------------------------


def test_compile_fullgraph_dynamic_forward_and_backward(gen):
    x = make((6, 32), torch.float32, gen).requires_grad_()
    w = make((32,), torch.float32, gen, 1.0).requires_grad_()
    fn = torch.compile(lambda a, b: ops.rms_norm(a, b, 1e-6) * 2, fullgraph=True, dynamic=True)
    y = fn(x, w)
    torch.testing.assert_close(y, ops.rms_norm(x, w, 1e-6) * 2)
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    ex, ew = torch.autograd.grad((ops.rms_norm(x, w, 1e-6) * 2).sum(), (x, w))
    torch.testing.assert_close((gx, gw), (ex, ew))
    x2 = make((10, 32), torch.float32, gen)
    torch.testing.assert_close(fn(x2, w), ops.rms_norm(x2, w, 1e-6) * 2)


def test_export_with_a_dynamic_batch(gen):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = tierkit_torch.RMSNorm(16, eps=1e-6)

        def forward(self, x):
            return self.norm(x)

    m = M()
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(m, (make((4, 16), torch.float32, gen),), dynamic_shapes=({0: batch},))
    x = make((9, 16), torch.float32, gen)
    torch.testing.assert_close(ep.module()(x), m(x))


@pytest.mark.parametrize(
    "name,args",
    [
        ("rms_norm", lambda g: (make((3, 8), torch.float32, g).requires_grad_(), None, 1e-5)),
        ("rms_norm", lambda g: (make((2, 3, 8), torch.float64, g), make((8,), torch.float64, g), None)),
        (
            "rms_norm",
            lambda g: (
                make((3, 8), torch.float32, g).requires_grad_(),
                make((8,), torch.float32, g).requires_grad_(),
                None,
            ),
        ),
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


# ---- add_rms_norm, add_rms_norm_ -----------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rms_norm_is_the_add_then_the_norm(dtype, gen):
    x, r = make((5, 40), dtype, gen), make((5, 40), dtype, gen)
    w = make((40,), dtype, gen, 1.0)
    y, h = ops.add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(h, x + r)  # rounded to the dtype first, as the model would
    assert torch.equal(y, ops.rms_norm(x + r, w, 1e-6))


def test_add_rms_norm_gradients_match_the_composite(gen):
    x, r = (
        make((3, 6), torch.float64, gen).requires_grad_(),
        make((3, 6), torch.float64, gen).requires_grad_(),
    )
    w = make((6,), torch.float64, gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: ops.add_rms_norm(*a, 1e-5), (x, r, w), check_forward_ad=True)


def test_add_rms_norm_in_place(gen):
    x, r = make((4, 16), torch.float32, gen), make((4, 16), torch.float32, gen)
    w = make((16,), torch.float32, gen, 1.0)
    want_y, want_h = ops.add_rms_norm(x, r, w, 1e-6)
    version = r._version
    y = ops.add_rms_norm_(x, r, w, 1e-6)
    assert torch.equal(y, want_y) and torch.equal(r, want_h) and r._version > version
    strided = torch.empty(16, 4).t()
    strided.copy_(want_h - x)
    ops.add_rms_norm_(x, strided, w, 1e-6)  # a strided residual is written in place
    torch.testing.assert_close(strided, want_h)
    with pytest.raises(RuntimeError, match=r"tierkit::add_rms_norm_: writes into `residual` .*requires grad"):
        ops.add_rms_norm_(x.requires_grad_(), r, w)


def test_add_rms_norm_in_place_is_functionalized_under_compile(gen):
    x, r = make((4, 16), torch.float32, gen), make((4, 16), torch.float32, gen)
    r2 = r.clone()

    @torch.compile(fullgraph=True)
    def step(a, b):
        return tierkit_torch.add_rms_norm_(a, b, None, 1e-6) * 2

    y = step(x, r)
    want = ops.add_rms_norm_(x, r2, None, 1e-6) * 2
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(r, r2)


# ---- the module ----------------------------------------------------------------------


def test_rmsnorm_is_a_drop_in_for_torchs(gen):
    ours, theirs = tierkit_torch.RMSNorm(24, eps=1e-6), torch.nn.RMSNorm(24, eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(make((24,), torch.float32, gen, 1.0))
    ours.load_state_dict(theirs.state_dict())
    x = make((3, 5, 24), torch.float32, gen)
    torch.testing.assert_close(ours(x), theirs(x))
    theirs.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == {"weight"}
    plain = tierkit_torch.RMSNorm((24,), elementwise_affine=False)
    assert plain.weight is None and not list(plain.parameters())
    torch.testing.assert_close(plain(x), F.rms_norm(x, (24,)))
    assert "eps=1e-06" in repr(ours)
    bf = tierkit_torch.RMSNorm(24, dtype=torch.bfloat16)
    assert bf.weight.dtype == torch.bfloat16 and bf(x.bfloat16()).dtype == torch.bfloat16


def test_rmsnorm_refuses_what_it_cannot_normalise():
    with pytest.raises(ValueError, match=r"normalized_shape: expected one dimension .*got \(4, 8\)"):
        tierkit_torch.RMSNorm((4, 8))
    with pytest.raises(RuntimeError, match=r"input: expected a last dimension of 8 .*got shape \[3, 7\]"):
        tierkit_torch.RMSNorm(8)(torch.ones(3, 7))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_scripts_as_torchs_does(affine, gen):
    ours = tierkit_torch.RMSNorm(24, eps=1e-6, elementwise_affine=affine)
    theirs = torch.nn.RMSNorm(24, eps=1e-6, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ours.weight.copy_(make((24,), torch.float32, gen, 1.0))
            theirs.weight.copy_(ours.weight)
    scripted, reference = torch.jit.script(ours), torch.jit.script(theirs)
    x = make((3, 24), torch.float32, gen)
    assert torch.equal(scripted(x), ours(x))
    torch.testing.assert_close(scripted(x), reference(x))
    # TorchScript raises its own torch.jit.Error, carrying the module's message
    with pytest.raises(torch.jit.Error, match=r"input: expected a last dimension of 24"):
        scripted(torch.ones(3, 7))
