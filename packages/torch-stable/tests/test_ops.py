"""Values against torch on the usual layouts and dtypes, and the .out rules."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the library, registers the Python kernels)
import torch
from tierkit_torch_common import testing
from tierkit_torch_stable import ops as face

NS = "tierkit_stable"
ops = torch.ops.tierkit_stable
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


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
@pytest.mark.parametrize("name", testing.NAMES)
def test_matches_torch(name, layout, dtype):
    # Every entry of the op table, from its entry alone (a new one is tested
    # here with no new test code): 16-bit computed in float32, rounded once.
    gen = torch.Generator().manual_seed(0)
    inputs = [LAYOUTS[layout](t) for t in testing.random_inputs(name, 3, 8, 6, dtype=dtype, generator=gen)]
    got = testing.call(NS, name, *inputs)
    want = testing.expected(name, *inputs)
    assert got.dtype == dtype and got.shape == inputs[0].shape
    torch.testing.assert_close(got, want, **testing.tolerance(name, dtype))


@pytest.mark.parametrize("name", testing.NAMES)
def test_out_overload_of_every_entry(name):
    gen = torch.Generator().manual_seed(1)
    inputs = testing.random_inputs(name, 5, 7, generator=gen)
    out = torch.empty(5, 7)
    assert testing.call(NS, name, *inputs, out=out) is out
    torch.testing.assert_close(out, testing.expected(name, *inputs), **testing.tolerance(name, torch.float32))


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
