"""Every bad call gets a RuntimeError naming the op, the argument, what was
expected and what came: the same sentences as the tierkit:: ops."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401
import torch

ops = torch.ops.tierkit_stable
A = torch.randn(2, 3)

CASES = [
    (
        "int dtype",
        lambda: ops.custom_add(A.int(), A.int()),
        r"tierkit_stable::custom_add: a: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
    (
        "complex x",
        lambda: ops.scale_shift(A.to(torch.complex128), 1.0, 1.0),
        r"tierkit_stable::scale_shift: x: expected dtype .* got complex128",
    ),
    (
        "complex",
        lambda: ops.mul(A.to(torch.complex64), A.to(torch.complex64)),
        r"a: expected dtype .*got complex64",
    ),
    (
        "integer result",
        lambda: ops.mul(A.int(), A.long()),
        r"tierkit_stable::mul: a: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
    (
        "shapes that do not broadcast",
        lambda: ops.muladd(A, A.t(), 1.0),
        r"tierkit_stable::muladd: b: expected a shape that broadcasts with \[2, 3\] \(a\), got \[3, 2\]",
    ),
    (
        "device mismatch",
        lambda: ops.custom_add(A, A.to("meta")),
        r"b: expected device cpu \(same as a\), got meta",
    ),
    (
        "out shape",
        lambda: ops.mul.out(A, A, out=torch.empty(3)),
        r"tierkit_stable::mul.out: out: expected shape \[2, 3\] \(the result's\), got \[3\]",
    ),
    (
        "out dtype",
        lambda: ops.custom_add.out(A, A, out=torch.empty(2, 3, dtype=torch.int32)),
        r"tierkit_stable::custom_add.out: out: expected a dtype the result \(float32\) can be cast to, got int32",
    ),
    (
        "out expanded",
        lambda: ops.custom_add.out(A, A, out=torch.empty(2, 1).expand(2, 3)),
        r"out: has stride 0 in dimension 1",
    ),
    (
        "out partial overlap",
        lambda: (lambda c: ops.add_out(c[:, :2], c[:, :2], c[:, 1:]))(A.clone()),
        r"out: overlaps input 'a'",
    ),
    (
        "add_out shape",
        lambda: ops.add_out(A, A, torch.empty(3)),
        r"tierkit_stable::add_out: out: expected shape \[2, 3\] \(the result's\), got \[3\]",
    ),
]


@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_call(call, pattern):
    with pytest.raises(RuntimeError, match=pattern):
        call()


def test_meta_tensors_get_the_same_checks():
    m = torch.empty(2, 3, device="meta")
    with pytest.raises(
        RuntimeError,
        match=r"tierkit_stable::mul: b: expected a shape that broadcasts with \[2, 3\] \(a\), got \[3, 2\]",
    ):
        ops.mul(m, m.t())
    assert ops.mul(m, m.double()).dtype == torch.float64  # promoted, as aten does
    assert ops.mul(m, m).shape == (2, 3)


def test_none_or_scalar_where_a_tensor_is_needed():
    with pytest.raises((TypeError, RuntimeError), match="(?i)tensor"):
        ops.custom_add(A, None)
    with pytest.raises((TypeError, RuntimeError), match="(?i)tensor"):
        ops.mul(A, 2.0)
