"""Every bad call gets a RuntimeError naming the op, the argument, what was expected and what came."""

import pytest
import torch

ops = torch.ops.tierkit
A = torch.randn(2, 3)

CASES = [
    (
        "int dtype",
        lambda: ops.custom_add(A.int(), A.int()),
        "tierkit::custom_add: a: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
    (
        "complex x",
        lambda: ops.scale_shift(A.to(torch.complex128), 1.0, 1.0),
        "tierkit::scale_shift: x: expected dtype .* got complex128",
    ),
    (
        "complex",
        lambda: ops.mul(A.to(torch.complex64), A.to(torch.complex64)),
        "a: expected dtype .*got complex64",
    ),
    (
        "integer result",  # int32 and int64 promote to int64, which the kernels do not compute
        lambda: ops.mul(A.int(), A.long()),
        "tierkit::mul: a: expected dtype float32, float64, float16 or bfloat16, got int32",
    ),
    (
        "shapes that do not broadcast",
        lambda: ops.muladd(A, A.t(), 1.0),
        "tierkit::muladd: b: expected a shape that broadcasts with \\[2, 3\\] \\(a\\), got \\[3, 2\\]",
    ),
    (
        "device mismatch",
        lambda: ops.custom_add(A, A.to("meta")),
        "b: expected device cpu \\(same as a\\), got meta",
    ),
]


@pytest.mark.parametrize(("call", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_call(call, pattern):
    with pytest.raises(RuntimeError, match=pattern):
        call()


def test_none_where_a_tensor_is_needed():
    with pytest.raises((TypeError, RuntimeError), match="(?i)tensor"):
        ops.custom_add(A, None)


def test_python_scalar_where_a_tensor_is_needed():
    with pytest.raises((TypeError, RuntimeError), match="(?i)tensor"):
        ops.mul(A, 2.0)


def test_wrong_scalar_type_for_alpha():
    with pytest.raises((TypeError, RuntimeError)):
        ops.scale_shift(A, "two", 1.0)


def test_meta_tensors_get_the_same_checks():
    m = torch.empty(2, 3, device="meta")
    out = ops.custom_add(m, m)
    assert out.device.type == "meta" and out.shape == (2, 3)
    with pytest.raises(
        RuntimeError, match="b: expected a shape that broadcasts with \\[2, 3\\] \\(a\\), got \\[3, 2\\]"
    ):
        ops.custom_add(m, m.t())
    with pytest.raises(
        RuntimeError,
        match="tierkit::custom_add: a: expected dtype float32, float64, float16 or bfloat16, got int64",
    ):
        ops.custom_add(
            torch.empty(3, device="meta", dtype=torch.int64), torch.empty(3, device="meta", dtype=torch.int64)
        )
