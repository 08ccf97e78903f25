"""Every input the bridge refuses: the exception type and a message naming the argument."""

import numpy as np
import pytest
import tierkit_bridge as tb

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

F32 = np.arange(6, dtype=np.float32)


class FakeCudaArray:
    """A DLPack producer that says its memory is on a GPU."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):  # pragma: no cover - must never be reached
        raise AssertionError("the device must be checked before exporting")


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


CASES = [
    # (id, call, exception, message regex)
    (
        "int dtype",
        lambda: tb.add(F32.astype(np.int64), F32.astype(np.int64)),  # int64 + float32 promotes
        TypeError,
        "a: expected dtype float32, float64, float16 or bfloat16, got int64",
    ),
    (
        "int8 format",
        lambda: tb.scale_shift(np.zeros(3, np.int8), 1, 1),
        TypeError,
        "x: expected dtype float32, float64, float16 or bfloat16, got int8$",
    ),
    # numpy's dtype names: the operand's own, then what the operands promote to.
    (
        "complex",
        lambda: tb.add(F32, np.zeros(6, np.complex64)),
        TypeError,
        "b: expected dtype float32, float64, float16 or bfloat16, got complex64$",
    ),
    ("bool", lambda: tb.mul(np.ones(3, bool), np.ones(3, bool)), TypeError, "a: expected .*, got bool$"),
    (
        "float128",
        lambda: tb.add(np.ones(2, np.longdouble), F32[:2]),
        TypeError,
        "a: expected .*, got float128",
    ),
    (
        "int promotes to int",
        lambda: tb.add(np.ones(3, np.int16), np.ones(3, np.int8)),
        TypeError,
        "a: expected dtype float32, float64, float16 or bfloat16, got int16$",
    ),
    (
        "complex scalar",
        lambda: tb.add(F32, 1j),
        TypeError,
        r"a/b: expected dtype .*, got complex64$",
    ),
    (
        "int8 memoryview",
        lambda: tb.add(memoryview(np.zeros(3, np.int8)), memoryview(np.zeros(3, np.int8))),
        TypeError,
        "a: unsupported element type int8 \\(buffer format 'b'\\)",
    ),
    (
        "shape mismatch",
        lambda: tb.muladd(F32.reshape(2, 3), F32.reshape(3, 2), 1.0),
        ValueError,
        "b: expected a shape that broadcasts with a's \\(2, 3\\), got \\(3, 2\\)",
    ),
    (
        "out shape",
        lambda: tb.add(F32, F32, out=np.empty(5, np.float32)),
        ValueError,
        "out: expected shape \\(6,\\) \\(the operands' broadcast shape\\) or one it broadcasts to, got \\(5,\\)",
    ),
    (
        "out shape smaller than the broadcast",
        lambda: tb.add(F32.reshape(2, 3), F32[:3], out=np.empty(3, np.float32)),
        ValueError,
        "out: expected shape \\(2, 3\\) .*got \\(3,\\)",
    ),
    (
        "out dtype",
        lambda: tb.add(F32, F32, out=np.empty(6, np.int32)),
        TypeError,
        "out: expected a dtype float32 casts to under numpy's same_kind rule, got int32",
    ),
    (
        "masked out",
        lambda: tb.add(F32, F32, out=np.ma.zeros(6, np.float32)),
        TypeError,
        "out: expected an array without a mask, got a numpy.ma.MaskedArray",
    ),
    (
        "read-only out",
        lambda: tb.add(F32, F32, out=read_only(F32)),
        ValueError,
        "out: expected a writable array, got a read-only ndarray",
    ),
    (
        "read-only bytes out",
        lambda: tb.scale_shift(F32, 1, 1, out=memoryview(F32.tobytes()).cast("f")),
        ValueError,
        "out: expected a writable array",
    ),
    (
        "big-endian memoryview",
        lambda: tb.add(memoryview(F32), memoryview(F32.astype(">f4"))),
        ValueError,
        "b: expected native byte order, got format '>f'",
    ),
    (
        "non-cpu dlpack",
        lambda: tb.add(FakeCudaArray(), F32),
        ValueError,
        "a: expected CPU memory, got DLPack device \\(2, 0\\) = cuda:0",
    ),
    ("partial overlap", lambda: _overlap(), ValueError, "out: overlaps input 'x'"),
    (
        "None",
        lambda: tb.add(None, F32),
        TypeError,
        "a: expected an array \\(buffer protocol or __dlpack__\\), got NoneType",
    ),
    ("list", lambda: tb.add(F32, [1.0] * 6), TypeError, "b: expected an array .*got list"),
    (
        "raw byte buffer",
        lambda: tb.add(tb.Buffer(8), tb.Buffer(8)),
        TypeError,
        "a: a raw byte Buffer has no element type",
    ),
    ("bad strides", lambda: _odd_strides(), ValueError, "a: strides must be multiples of the item size"),
    (
        "alpha not a number",
        lambda: tb.scale_shift(F32, "2", 1),
        TypeError,
        r"scale_shift\(\): alpha: expected a real number \(float or int\), got str",
    ),
    ("c a bool", lambda: tb.muladd(F32, F32, True), TypeError, r"c: expected a real number .*got bool"),
    (
        "beta complex",
        lambda: tb.scale_shift(F32, 1, 1j),
        TypeError,
        r"beta: expected a real number .*got complex",
    ),
    # The calling convention (vectorcall, parsed in C++): Python's own wording.
    ("missing b", lambda: tb.add(F32), TypeError, r"add\(\) missing required argument: 'b'"),
    ("too many", lambda: tb.add(F32, F32, F32), TypeError, r"add\(\) takes 2 positional arguments but 3"),
    ("unknown keyword", lambda: tb.mul(F32, F32, outt=F32), TypeError, r"unexpected keyword argument 'outt'"),
    ("twice", lambda: tb.muladd(F32, F32, 1.0, c=2.0), TypeError, r"multiple values for argument 'c'"),
]


def _overlap():
    buf = np.arange(10, dtype=np.float32)
    return tb.scale_shift(buf[:-1], 1, 1, out=buf[1:])


def _odd_strides():
    raw = np.zeros(40, np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw.view(np.float32), shape=(3,), strides=(6,))
    return tb.add(odd, np.zeros(3, np.float32))


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_clear_message(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


@needs_torch
def test_torch_tensor_requiring_grad_names_the_argument():
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(
        ValueError, match="a: expected a tensor that does not require grad, got one with .*detach"
    ):
        tb.add(t, t)
    out = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="out: expected a tensor that does not require grad"):
        tb.add(torch.ones(3), torch.ones(3), out=out)
    assert out.detach().tolist() == [0.0, 0.0, 0.0]


@needs_torch
def test_torch_int_tensor():
    t = torch.ones(3, dtype=torch.int32)
    with pytest.raises(TypeError, match="a: expected dtype float32, float64, float16 or bfloat16, got int32"):
        tb.add(t, t)


def test_ops_take_keywords_and_numpy_scalars_like_a_def():
    import inspect

    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(tb.muladd(a=x, b=x, c=np.int64(2)), x * x + 2)
    np.testing.assert_array_equal(tb.scale_shift(x, np.float32(1.5), beta=-1), 1.5 * x - 1)
    out = np.empty_like(x)
    assert tb.add(x, b=x, out=out) is out
    np.testing.assert_array_equal(out, x + x)
    assert str(inspect.signature(tb.scale_shift)) == "(x, alpha, beta, *, out=None)"
    assert str(inspect.signature(tb.add)) == "(a, b, *, out=None)"
