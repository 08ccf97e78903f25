"""Negative-bit views (z.conj().imag) through tierkit_stable: read by their
values, written through by value, and add_out returns `out` so torch's
math-bits fallback can write it back (it raised `Expected Tensor but got
None` when add_out returned nothing)."""

from __future__ import annotations

import gc

import tierkit_torch_stable  # noqa: F401  (loads the library, registers the Python kernels)
import torch

ops = torch.ops.tierkit_stable


def lazily_negated(values: torch.Tensor) -> torch.Tensor:
    view = torch.complex(torch.zeros_like(values), -values).conj().imag
    assert view.is_neg()
    return view


def test_inputs_and_outputs_with_the_negative_bit():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)
    na, nb = lazily_negated(a), lazily_negated(b)
    torch.testing.assert_close(ops.custom_add(na, nb), a + b, rtol=0, atol=0)
    torch.testing.assert_close(ops.muladd(na, nb, 2.0), a * b + 2.0, rtol=0, atol=0)
    torch.testing.assert_close(ops.scale_shift(na, 2.0, 1.0), a * 2.0 + 1.0, rtol=0, atol=0)
    for write, expected in (
        (lambda out: ops.add_out(a, b, out), a + b),
        (lambda out: ops.custom_add.out(a, b, out=out), a + b),
        (lambda out: ops.mul.out(na, b, out=out), a * b),
    ):
        out = lazily_negated(torch.zeros(4, 3))
        assert write(out) is out
        gc.collect()
        torch.testing.assert_close(out, expected, rtol=0, atol=0)  # reads back as the result
