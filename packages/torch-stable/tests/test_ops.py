"""Values against torch on the usual layouts and dtypes, and the .out rules."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the library, registers the Python kernels)
import torch
from tierkit_torch_stable import ops as face

ops = torch.ops.tierkit_stable
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def compute(dtype: torch.dtype) -> torch.dtype:
    """16-bit inputs are computed in float32 and rounded once, as core does."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def reference(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = compute(a.dtype)
    fa, fb = a.to(c), b.to(c)
    out = {
        "custom_add": lambda: fa + fb,
        "mul": lambda: fa * fb,
        "muladd": lambda: torch.addcmul(torch.full_like(fa, 0.75), fa, fb),
        "scale_shift": lambda: fa * 1.5 - 0.25,
    }[name]()
    return out.to(a.dtype)


def call(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if name == "muladd":
        return ops.muladd(a, b, 0.75)
    if name == "scale_shift":
        return ops.scale_shift(a, 1.5, -0.25)
    return getattr(ops, name)(a, b)


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.transpose(-1, -2),
    "sliced": lambda t: t[..., ::2],
    "channels_last": lambda t: (
        t.unsqueeze(0).expand(2, *t.shape).contiguous(memory_format=torch.channels_last)
        if t.dim() == 3
        else t
    ),
    "expanded_input": lambda t: t[..., :1].expand(t.shape),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["custom_add", "mul", "muladd", "scale_shift"])
def test_matches_torch(name, layout, dtype):
    gen = torch.Generator().manual_seed(0)
    base_a = torch.randn(3, 8, 6, generator=gen).to(dtype)
    base_b = torch.randn(3, 8, 6, generator=gen).to(dtype)
    a, b = LAYOUTS[layout](base_a), LAYOUTS[layout](base_b)
    got = call(name, a, b)
    want = reference(name, a, b)
    # muladd's reference rounds a*b once more (addcmul computes in c's dtype); one ulp.
    if name == "muladd" and dtype in (torch.float32, torch.float64):
        torch.testing.assert_close(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_dense_layouts_are_kept_like_aten(layout):
    a = LAYOUTS[layout](torch.randn(3, 8, 6))
    assert ops.custom_add(a, a).stride() == (a + a).stride()


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1,), (2, 1, 1, 1, 1, 1, 1, 1, 3)])
def test_edge_shapes(shape):
    a = torch.randn(shape)
    torch.testing.assert_close(ops.mul(a, a), a * a, rtol=0, atol=0)


def test_rank_beyond_core_limit_non_contiguous():
    a = torch.randn([2] * 10).transpose(0, 9)
    torch.testing.assert_close(ops.custom_add(a, a), a + a, rtol=0, atol=0)
    out = torch.empty([2] * 10).transpose(0, 9)
    ops.custom_add.out(a, a, out=out)
    torch.testing.assert_close(out, a + a, rtol=0, atol=0)


def test_out_overloads_write_and_return_out():
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    out = torch.empty(4, 5)
    assert face.mul(a, b, out=out) is out
    torch.testing.assert_close(out, a * b, rtol=0, atol=0)
    empty = torch.empty(0)
    face.scale_shift(a, 2.0, 1.0, out=empty)
    assert empty.shape == a.shape
    torch.testing.assert_close(empty, a * 2 + 1, rtol=0, atol=0)


def test_add_out_in_place_alias():
    a, b = torch.randn(6), torch.randn(6)
    want = a + b
    face.add_out(a, b, a)
    torch.testing.assert_close(a, want, rtol=0, atol=0)


def test_out_bumps_version_counter():
    a, out = torch.randn(3), torch.empty(3)
    before = out._version
    ops.custom_add.out(a, a, out=out)
    ops.add_out(a, a, out)
    assert out._version >= before + 2


def test_set_num_threads_governs_the_split():
    a = torch.randn(1 << 20)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        torch.testing.assert_close(ops.custom_add(a, a), a + a, rtol=0, atol=0)
    finally:
        torch.set_num_threads(old)
