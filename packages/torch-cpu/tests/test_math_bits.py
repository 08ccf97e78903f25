"""Tensors with torch's negative or conjugate bit (lazy views such as
z.conj().imag) are read by their values and written through correctly, by
every op of both overloads. torch's math-bits fallback resolves them around
the kernels; it asserts (and a kept exception then crashed the interpreter at
the next garbage collection) on a mutating op that returns nothing, which
add_out once was.
"""

import gc

import pytest
import torch

ops = torch.ops.tierkit


def neg_view(values):
    """A real view with the negative bit set that reads as `values`."""
    z = torch.complex(torch.zeros_like(values), -values)
    v = z.conj().imag
    assert v.is_neg() and torch.equal(v, values)
    return v


@pytest.fixture
def vals(gen):
    return torch.randn(3, 5, generator=gen)


CASES = {
    "custom_add": (lambda a, b: ops.custom_add(a, b), torch.add),
    "mul": (lambda a, b: ops.mul(a, b), torch.mul),
    "muladd": (lambda a, b: ops.muladd(a, b, 0.5), lambda a, b: a * b + 0.5),
    "scale_shift": (lambda a, b: ops.scale_shift(a, 2.0, -1.0), lambda a, b: a * 2.0 - 1.0),
}
OUT_CASES = {
    "add_out": (lambda a, b, out: ops.add_out(a, b, out), torch.add),
    "custom_add.out": (lambda a, b, out: ops.custom_add.out(a, b, out=out), torch.add),
    "mul.out": (lambda a, b, out: ops.mul.out(a, b, out=out), torch.mul),
    "muladd.out": (lambda a, b, out: ops.muladd.out(a, b, 0.5, out=out), lambda a, b: a * b + 0.5),
    "scale_shift.out": (lambda a, b, out: ops.scale_shift.out(a, 2.0, -1.0, out=out), lambda a, b: a * 2 - 1),
}


@pytest.mark.parametrize("name", CASES)
def test_negative_bit_inputs_are_read_by_value(name, vals, gen):
    op, ref = CASES[name]
    b = torch.randn(3, 5, generator=gen)
    torch.testing.assert_close(op(neg_view(vals), neg_view(b)), ref(vals, b), rtol=0, atol=0)


@pytest.mark.parametrize("name", OUT_CASES)
def test_negative_bit_out_is_written_by_value(name, vals, gen):
    op, ref = OUT_CASES[name]
    b = torch.randn(3, 5, generator=gen)
    out = neg_view(torch.zeros(3, 5))
    returned = op(vals, b, out)
    assert returned is out
    gc.collect()
    torch.testing.assert_close(out, ref(vals, b), rtol=0, atol=0)  # reads back as the result


def test_a_refused_negative_bit_call_keeps_the_interpreter_alive(vals):
    # A bad call through the fallback raises a clear error; the exception,
    # kept alive as pytest keeps it, survives a garbage collection.
    with pytest.raises(RuntimeError, match=r"tierkit::add_out: out: expected shape \[3, 5\]") as kept:
        ops.add_out(vals, vals, neg_view(torch.zeros(4)))
    gc.collect()
    assert "tierkit::add_out" in str(kept.value)


def test_conjugate_bit_tensors_are_refused_by_dtype():
    z = torch.complex(torch.ones(3), torch.ones(3)).conj()
    assert z.is_conj()
    with pytest.raises(RuntimeError, match="tierkit::custom_add: a: expected dtype"):
        ops.custom_add(z, z)
    gc.collect()
