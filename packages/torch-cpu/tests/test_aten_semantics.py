"""A tierkit op is interchangeable with its aten counterpart: broadcasting,
type promotion (0-d tensors included), out= of another dtype, autocast,
interleaved out=, gradients of broadcast and promoted inputs, vmap, fake
tensors and compile; errors in torch's dtype names, the same from the fake
and the real kernel. Each case is checked against aten on the same inputs:
values, dtype, shape and strides. Both namespaces: tierkit (this tier) and
tierkit_stable where torch-stable is installed.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tierkit_core.op_table import ROW_REDUCTIONS, find
from tierkit_core.op_testing import dtype_pairs
from tierkit_torch_common import testing

NAMESPACES = ["tierkit"]
if importlib.util.find_spec("tierkit_torch_stable") is not None:
    import tierkit_torch_stable  # noqa: F401  (registers tierkit_stable)

    NAMESPACES.append("tierkit_stable")

# Every entry of the op table, from its entry alone (a new one is checked
# here with no new test code): its reference formula over aten's ops gives
# aten's dtype, shape and layout for the same call.
BINARY = [op for op, n in testing.ARITY.items() if n == 2]
UNARY = [op for op, n in testing.ARITY.items() if n == 1]
C = testing.C


def aten(op, *tensors):
    """aten's result, holding the float64 value rounded once through the
    compute type (16-bit results in float32), as the kernels compute it."""
    return testing.wide(op, *tensors)


def call(ns, op, *tensors, **kw):
    return testing.call(ns, op, *tensors, **kw)


def assert_like_aten(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got, want)


gen = torch.Generator().manual_seed(7)


def rand(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=gen).to(dtype)


BROADCASTS = {
    "column-row": ((3, 1), (1, 4)),
    "0-d with 1-D": ((), (5,)),
    "1-D with 0-d": ((5,), ()),
    "lower rank": ((2, 3, 4), (4,)),
    "size-1 middle": ((2, 1, 4), (2, 3, 1)),
    "empty": ((0, 3), (1, 3)),
}


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("case", BROADCASTS)
def test_broadcasting(ns, op, case):
    sa, sb = BROADCASTS[case]
    a, b = rand(*sa), rand(*sb)
    assert_like_aten(call(ns, op, a, b), aten(op, a, b))


PROMOTIONS = {
    "f32+f64": (torch.float32, torch.float64),
    "bf16+f32": (torch.bfloat16, torch.float32),
    "f16+bf16": (torch.float16, torch.bfloat16),
    "int64+f16": (torch.int64, torch.float16),
    "bool+f64": (torch.bool, torch.float64),
}


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("case", PROMOTIONS)
def test_type_promotion(ns, op, case):
    da, db = PROMOTIONS[case]
    a = (rand(4, 3) * 4).to(da)
    b = (rand(4, 3) * 4).to(db)
    assert_like_aten(call(ns, op, a, b), aten(op, a, b))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
def test_a_0d_tensor_ranks_below_a_dimensioned_one(ns, op):
    a, b = rand(6), torch.tensor(2.5, dtype=torch.float64)
    got = call(ns, op, a, b)
    assert got.dtype == torch.float32  # torch.result_type: the 0-d float64 does not widen
    assert_like_aten(got, aten(op, a, b))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_scale_shift_of_integers_is_float_like_aten(ns):
    x = torch.arange(-3, 3)
    got = call(ns, "scale_shift", x)
    assert got.dtype == torch.get_default_dtype()
    assert_like_aten(got, aten("scale_shift", x))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
def test_layouts_follow_aten(ns, op):
    cl = rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    bias = rand(3, 1, 1)
    assert_like_aten(call(ns, op, cl, bias), aten(op, cl, bias))
    t = rand(5, 4).t()
    assert_like_aten(call(ns, op, t, t), aten(op, t, t))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", testing.NAMES)
def test_out_of_a_wider_dtype_is_written_cast(ns, op):
    inputs = [rand(3, 4), rand(4)][: testing.ARITY[op]]
    out = torch.full((3, 4), 7.0, dtype=torch.float64)
    returned = call(ns, op, *inputs, out=out)
    assert returned is out and out.dtype == torch.float64
    want = aten(op, *inputs)
    # Computed in float32 (the result dtype, as aten does), then cast.
    torch.testing.assert_close(out, want.double(), rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_out_of_an_integer_dtype_is_refused_untouched(ns):
    a = rand(3)
    out = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(
        RuntimeError,
        match=rf"{ns}::custom_add.out: out: expected a dtype the result \(float32\) can be cast to, got int64",
    ):
        call(ns, "custom_add", a, a, out=out)
    assert not out.any()


@pytest.mark.parametrize("ns", NAMESPACES)
def test_out_gets_the_broadcast_shape(ns):
    a, b = rand(3, 1), rand(1, 4)
    out = torch.empty(0)
    call(ns, "mul", a, b, out=out)
    assert_like_aten(out, aten("mul", a, b))
    with pytest.raises(
        RuntimeError, match=rf"{ns}::mul.out: out: expected shape \[3, 4\] \(the result's\), got \[3\]"
    ):
        call(ns, "mul", a, b, out=torch.empty(3))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_interleaved_out_sharing_no_element_is_computed(ns):
    base = torch.arange(12.0)
    a = base[1::2]
    want = torch.add(a, a)
    call(ns, "custom_add", a, a, out=base[::2])
    assert torch.equal(base[::2], want)
    assert torch.equal(base[1::2], torch.arange(1.0, 12.0, 2))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_add_out_broadcasts_without_resizing(ns):
    ops = getattr(torch.ops, ns)
    a, b = rand(3, 1), rand(4)
    out = torch.empty(3, 4, dtype=torch.float64)
    assert ops.add_out(a, b, out) is out
    torch.testing.assert_close(out, (a + b).double(), rtol=0, atol=0)
    with pytest.raises(
        RuntimeError, match=rf"{ns}::add_out: out: expected shape \[3, 4\] \(the result's\), got \[0\]"
    ):
        ops.add_out(a, b, torch.empty(0))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_autocast_promotes_like_aten(ns):
    y, bias = rand(4, 3, dtype=torch.bfloat16), rand(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = call(ns, "custom_add", y, bias), torch.add(y, bias)
    assert got.dtype == want.dtype == torch.float32
    assert_like_aten(got, aten("custom_add", y, bias))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
def test_gradients_of_broadcast_and_promoted_inputs(ns, op):
    a = rand(3, 1).requires_grad_()
    b = rand(4, dtype=torch.float64).requires_grad_()
    ours = call(ns, op, a, b)
    theirs = testing.composite(op, a, b)
    assert ours.dtype == theirs.dtype == torch.float64
    g = torch.randn(3, 4, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad(ours, (a, b), g)
    want = torch.autograd.grad(theirs, (a, b), g)
    for x, y in zip(got, want):
        assert x.dtype == y.dtype and x.shape == y.shape
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
def test_gradcheck_with_broadcasting(ns, op):
    a = torch.randn(3, 1, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: call(ns, op, x, y), (a, b))


@pytest.mark.parametrize("op", BINARY)
def test_forward_ad_with_broadcasting(op):
    import torch.autograd.forward_ad as fwAD

    a, b = rand(3, 1, dtype=torch.float64), rand(4, dtype=torch.float64)
    ta = torch.randn_like(a)
    with fwAD.dual_level():
        out = call("tierkit", op, fwAD.make_dual(a, ta), b)
        got = fwAD.unpack_dual(out).tangent
    want = torch.func.jvp(
        lambda x: testing.composite(op, x, b),
        (a,),
        (ta,),
    )[1]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", BINARY)
def test_vmap_with_operands_of_other_ranks(op):
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        xs, ys = rand(5, 3), rand(5, 2, 3)
        got = torch.vmap(lambda x, y: call("tierkit", op, x, y))(xs, ys)
        want = torch.stack([aten(op, x, y) for x, y in zip(xs, ys)])
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", BINARY)
def test_fake_tensors_agree_with_the_kernel(ns, op):
    from torch._subclasses.fake_tensor import FakeTensorMode

    cases = [
        (rand(3, 1), rand(1, 4)),
        (rand(4), rand(dtype=torch.float64)),
        (rand(2, 3).t(), rand(3, 1, dtype=torch.bfloat16)),
    ]
    for a, b in cases:
        real = call(ns, op, a, b)
        with FakeTensorMode() as mode:
            fake = call(ns, op, mode.from_tensor(a), mode.from_tensor(b))
        assert (fake.dtype, fake.shape, fake.stride()) == (real.dtype, real.shape, real.stride())


@pytest.mark.parametrize("ns", NAMESPACES)
def test_compile_broadcasting_and_promotion(ns):
    def f(a, b):
        return call(ns, "mul", a, b) + 1

    a, b = rand(3, 1), rand(4, dtype=torch.float64)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(a, b), torch.mul(a, b) + 1)


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(
    ("dtype", "name"),
    [(torch.uint16, "uint16"), (torch.uint32, "uint32"), (torch.complex32, "complex32"),
     (torch.float8_e4m3fn, "float8_e4m3fn"), (torch.complex64, "complex64"), (torch.int64, "int64")],
)  # fmt: skip
def test_errors_use_torchs_dtype_names_in_the_fake_and_the_real_kernel(ns, dtype, name):
    x = torch.zeros(3, dtype=dtype)
    pattern = rf"{ns}::custom_add: a: expected dtype float32, float64, float16 or bfloat16, got {name}$"
    with pytest.raises(RuntimeError, match=pattern):
        call(ns, "custom_add", x, x)
    with pytest.raises(RuntimeError, match=pattern):
        call(ns, "custom_add", x.to("meta"), x.to("meta"))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_shapes_that_do_not_broadcast_are_refused_alike(ns):
    pattern = rf"{ns}::mul: b: expected a shape that broadcasts with \[3\] \(a\), got \[4\]"
    for device in ("cpu", "meta"):
        with pytest.raises(RuntimeError, match=pattern):
            call(ns, "mul", torch.zeros(3, device=device), torch.zeros(4, device=device))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_every_out_error_names_the_out_overload(ns):
    base = torch.zeros(10)
    with pytest.raises(RuntimeError, match=rf"^{ns}::scale_shift.out: out: "):
        call(ns, "scale_shift", base[:8], out=base[1:9])
    strided = torch.zeros(4, 8)  # partly overlapping strided views: core's rule decides, the op named
    with pytest.raises(RuntimeError, match=rf"^{ns}::scale_shift.out: out: overlaps input"):
        call(ns, "scale_shift", strided[:, :4], out=strided[:, 2:6])


@pytest.mark.parametrize("face", ["tierkit_torch", "tierkit_torch_stable"])
def test_the_typed_face_refuses_a_scalar_tensor_that_requires_grad(face):
    if importlib.util.find_spec(face) is None:
        pytest.skip(f"{face} is not installed")
    ops = importlib.import_module(f"{face}.ops")
    x, alpha = rand(3), torch.tensor(2.0, requires_grad=True)
    with pytest.raises(
        TypeError, match=rf"{face}.scale_shift: alpha: expected a number, got a tensor that requires grad"
    ):
        ops.scale_shift(x, alpha, 0.0)
    with pytest.raises(TypeError, match=rf"{face}.muladd: c: expected a number"):
        ops.muladd(x, x, alpha)
    torch.testing.assert_close(ops.scale_shift(x, alpha.detach(), 1.0), x * 2 + 1)  # by value
    with torch.no_grad():
        torch.testing.assert_close(ops.scale_shift(x, alpha, 1.0), x * 2 + 1)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_an_inference_tensor_as_out_outside_inference_mode_is_refused(ns):
    with torch.inference_mode():
        out = torch.zeros(3)
    a = rand(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        call(ns, "custom_add", a, a, out=out)
    assert not out.any()
    with torch.inference_mode():
        call(ns, "custom_add", a, a, out=out)
    torch.testing.assert_close(out, a + a)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_an_inference_tensor_meets_one_that_requires_grad_as_in_aten(ns):
    with torch.inference_mode():
        frozen = torch.ones(3)
    w = rand(3).requires_grad_()
    call(ns, "custom_add", frozen, w).sum().backward()  # add saves nothing, so this works in aten
    torch.testing.assert_close(w.grad, torch.ones(3))


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("op", testing.NAMES)
def test_only_what_the_derivative_needs_is_saved(ns, op):
    inputs = [rand(4).requires_grad_() for _ in range(testing.ARITY[op])]
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        call(ns, op, *inputs)
    # The inputs its derivatives read, as aten's add and mul(x, scalar) save 0, mul saves 2.
    assert len(packed) == len(find(op).saved)


# ---- the row reductions with parameters of another float dtype, as aten's norms ----

# bfloat16/float32 first: the autocast block, bfloat16 activations with float32 weights.
MIXED = dtype_pairs(
    "bfloat16/float32 float16/float32 float16/bfloat16 float32/float64 float64/float32 float32/bfloat16",
    torch,
)
MIXED_IDS = [f"{str(a)[6:]}-x-{str(b)[6:]}-params" for a, b in MIXED]
# The rows with per-column parameters (the norms), whose mixed-dtype rule is aten's norms'.
_WITH_PARAMS = [e for e in ROW_REDUCTIONS if e.params]
ROWS = pytest.mark.parametrize("entry", _WITH_PARAMS, ids=[e.name for e in _WITH_PARAMS])


def _mixed_inputs(entry, xd, wd, requires_grad=False):
    g = torch.Generator().manual_seed(11)  # its own: the same values whatever ran before
    x = (torch.randn(6, 5, 64, generator=g) * 3).to(xd).requires_grad_(requires_grad)
    params = [
        (float(p == "weight") + torch.randn(64, generator=g) * 2).to(wd).requires_grad_(requires_grad)
        for p in entry.params
    ]
    return x, params


def _aten(entry, x, params, eps=1e-6):
    """aten's norm where its CPU kernels take the dtypes (16-bit x with float32
    parameters, every rms_norm pair); else the same computed in the compute
    type (float64 where x or a parameter is), rounded to x's dtype: aten's rule."""
    f = getattr(torch.nn.functional, entry.name)
    try:
        return f(x, (x.shape[-1],), *params, eps)
    except RuntimeError as e:
        assert "mixed dtype" in str(e), e
    c = torch.float64 if torch.float64 in (x.dtype, *(p.dtype for p in params)) else torch.float32
    return f(x.to(c), (x.shape[-1],), *(p.to(c) for p in params), eps).to(x.dtype)


@pytest.mark.parametrize("ns", NAMESPACES)
@ROWS
@pytest.mark.parametrize(("xd", "wd"), MIXED, ids=MIXED_IDS)
def test_rows_with_parameters_of_another_dtype_are_aten(ns, entry, xd, wd):
    x, params = _mixed_inputs(entry, xd, wd)
    ops = getattr(torch.ops, ns)
    want = _aten(entry, x, params)
    got = getattr(ops, entry.name)(x, *params, 1e-6)
    assert got.dtype == want.dtype == xd and got.shape == want.shape
    torch.testing.assert_close(got, want)
    # Against float64: no further from it than aten is (largest error, within
    # 2 ulps of x's dtype: float64 sums in float64 in another order than aten's).
    exact = _aten(entry, x.double(), [p.double() for p in params])
    ulp = 2 * torch.finfo(xd).eps * exact.abs().max()
    assert (got.double() - exact).abs().max() <= (want.double() - exact).abs().max() + ulp
    if not entry.fused_add:
        return
    # The fused forms: h rounded to x's dtype, then the same norm.
    r = torch.randn(6, 5, 64, generator=torch.Generator().manual_seed(12)).to(xd)
    y, h = getattr(ops, entry.add_name)(x, r, *params, 1e-6)
    assert torch.equal(h, x + r) and y.dtype == xd
    torch.testing.assert_close(y, _aten(entry, x + r, params))
    r2 = r.clone()
    torch.testing.assert_close(getattr(ops, entry.add_name + "_")(x, r2, *params, 1e-6), y, rtol=0, atol=0)
    assert torch.equal(r2, h)


@pytest.mark.parametrize("ns", NAMESPACES)
@ROWS
@pytest.mark.parametrize(("xd", "wd"), MIXED, ids=MIXED_IDS)
def test_row_gradients_with_parameters_of_another_dtype(ns, entry, xd, wd):
    x, params = _mixed_inputs(entry, xd, wd, requires_grad=True)
    ours = getattr(getattr(torch.ops, ns), entry.name)(x, *params, 1e-6)
    theirs = _aten(entry, x, params)
    g = torch.randn(6, 5, 64, generator=torch.Generator().manual_seed(13)).to(xd)
    mine = torch.autograd.grad(ours, (x, *params), g)
    aten = torch.autograd.grad(theirs, (x, *params), g)
    assert [t.dtype for t in mine] == [t.dtype for t in aten] == [xd] + [wd] * len(params)
    # 16-bit gradients: aten rounds its intermediate steps to x's dtype, tierkit
    # keeps them in float; compared against float64 instead where they differ.
    x64 = x.detach().double().requires_grad_()
    p64 = [p.detach().double().requires_grad_() for p in params]
    exact = torch.autograd.grad(_aten(entry, x64, p64), (x64, *p64), g.double())
    for ours_g, aten_g, e in zip(mine, aten, exact):
        # The saved statistics have x's stats dtype (float32 for float32 x, as
        # the schema's fake says), so a float64 parameter's gradient is as
        # exact as float32 statistics allow.
        coarser = max(
            torch.finfo(ours_g.dtype).eps, torch.finfo(torch.float32 if xd != torch.float64 else xd).eps
        )
        tol = 4 * coarser * e.abs().max()
        assert (ours_g.double() - e).abs().max() <= (aten_g.double() - e).abs().max() + tol


@pytest.mark.parametrize("ns", NAMESPACES)
@ROWS
def test_rows_mixed_dtypes_under_autocast_fakes_and_compile(ns, entry):
    from torch._subclasses.fake_tensor import FakeTensorMode

    ops = getattr(torch.ops, ns)
    f = getattr(ops, entry.name)
    x, params = _mixed_inputs(entry, torch.bfloat16, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # Qwen3's q_norm under autocast: once refused
        got, want = f(x, *params, 1e-6), _aten(entry, x, params)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    with FakeTensorMode() as mode:
        fake = f(mode.from_tensor(x), *map(mode.from_tensor, params), 1e-6)
        grads = getattr(ops, entry.backward_name)(
            mode.from_tensor(x),
            mode.from_tensor(x),
            *map(mode.from_tensor, params),
            mode.from_tensor(torch.ones(6, 5, len(entry.stats))),
        )
    assert (fake.dtype, fake.shape) == (got.dtype, got.shape)
    assert [t.dtype for t in grads] == [torch.bfloat16] + [torch.float32] * len(params)
    compiled = torch.compile(lambda a, *ps: f(a, *ps, 1e-6), fullgraph=True)
    torch.testing.assert_close(compiled(x, *params), f(x, *params, 1e-6), rtol=0, atol=0)
    for p in entry.params:
        with pytest.raises(RuntimeError, match=rf"{ns}::{entry.name}: {p}: expected dtype .*, got int32"):
            f(x, **{p: torch.ones(64, dtype=torch.int32)})
