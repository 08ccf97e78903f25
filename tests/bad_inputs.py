"""The catalogue of inputs the tiers refuse: (id, call, exception, regex the
message must match — it names the argument; the id's prefix names the tier). Used in-process by
test_bad_inputs.py and, case by case, in a subprocess that must exit
normally (no crash, no abort)."""

import numpy as np

F32 = np.arange(6, dtype=np.float32)


class FakeCudaArray:
    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("must not be exported")


def _ro():
    a = F32.copy()
    a.flags.writeable = False
    return a


def _overlap():
    """out overlaps the input shifted by one element: refused, never computed in the wrong order."""
    import tierkit_bridge as tb

    buf = np.arange(10, dtype=np.float32)
    return tb.scale_shift(buf[:-1], 1, 1, out=buf[1:])


def _odd_strides():
    """float32 elements 6 bytes apart: a stride that is not a multiple of the item size."""
    import tierkit_bridge as tb

    odd = np.lib.stride_tricks.as_strided(np.zeros(40, np.uint8).view(np.float32), shape=(3,), strides=(6,))
    return tb.add(odd, np.zeros(3, np.float32))


def bridge_cases():
    import tierkit_bridge as tb

    return [
        (
            "bridge-int-dtype",
            lambda: tb.add(F32.astype(np.int64), F32.astype(np.int64)),  # int64 + float32 promotes, as numpy
            TypeError,
            r"a: expected dtype float32, float64, float16 or bfloat16, got int64",
        ),
        (
            "bridge-int8-format",
            lambda: tb.scale_shift(np.zeros(3, np.int8), 1, 1),
            TypeError,
            r"x: expected dtype float32, float64, float16 or bfloat16, got int8",
        ),
        (
            "bridge-complex",
            lambda: tb.mul(F32, np.zeros(6, np.complex64)),
            TypeError,
            r"b: expected dtype .*, got complex64",
        ),
        ("bridge-bool", lambda: tb.add(F32 > 0, F32 > 0), TypeError, r"a: expected dtype .*, got bool"),
        (
            "bridge-shape-mismatch",  # numpy's broadcasting refuses these shapes too
            lambda: tb.muladd(F32.reshape(2, 3), F32.reshape(3, 2), 1.0),
            ValueError,
            r"b: expected a shape that broadcasts with a's \(2, 3\), got \(3, 2\)",
        ),
        (
            "bridge-out-shape",
            lambda: tb.add(F32, F32, out=np.empty(5, np.float32)),
            ValueError,
            r"out: expected shape \(6,\)",
        ),
        (
            "bridge-out-dtype",
            lambda: tb.add(F32, F32, out=np.empty(6, np.int32)),  # float64 would be cast, as numpy
            TypeError,
            r"out: expected a dtype float32 casts to under numpy's same_kind rule, got int32",
        ),
        (
            "bridge-read-only-out",
            lambda: tb.add(F32, F32, out=_ro()),
            ValueError,
            r"out: expected a writable array",
        ),
        (
            "bridge-bytes-out",
            lambda: tb.scale_shift(F32, 1, 1, out=memoryview(F32.tobytes()).cast("f")),
            ValueError,
            r"out: expected a writable array",
        ),
        (
            "bridge-big-endian",
            lambda: tb.add(memoryview(F32), memoryview(F32.astype(">f4"))),  # numpy arrays are converted
            ValueError,
            r"b: expected native byte order",
        ),
        (
            "bridge-non-cpu-dlpack",
            lambda: tb.add(FakeCudaArray(), F32),
            ValueError,
            r"a: expected CPU memory",
        ),
        ("bridge-partial-overlap", _overlap, ValueError, r"out: overlaps input 'x'"),
        ("bridge-none", lambda: tb.add(None, F32), TypeError, r"a: expected an array"),
        ("bridge-list", lambda: tb.add(F32, [1.0] * 6), TypeError, r"b: expected an array .*got list"),
        ("bridge-raw-bytes", lambda: tb.add(tb.Buffer(8), tb.Buffer(8)), TypeError, r"a: a raw byte Buffer"),
        ("bridge-odd-strides", _odd_strides, ValueError, r"a: strides must be multiples of the item size"),
        (
            "bridge-zero-stride-out",
            lambda: tb.add(
                F32, F32, out=np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (6,), (0,))
            ),
            ValueError,
            r"out: has stride 0",
        ),
        ("bridge-too-many-dims", lambda: tb.Buffer.empty((1,) * 9), ValueError, r"shape: expected at most 8"),
        (
            "bridge-negative-size",
            lambda: tb.Buffer.empty((3, -2)),
            ValueError,
            r"shape: expected non-negative",
        ),
        (
            "bridge-bad-shape-type",
            lambda: tb.Buffer.empty(2.5),
            TypeError,
            r"shape: expected an int or a sequence",
        ),
        (
            "bridge-bad-dtype-name",
            lambda: tb.Buffer.empty(3, "complex64"),
            TypeError,
            r"dtype: expected one of",
        ),
        (
            "bridge-bad-alignment",
            lambda: tb.Buffer(16, 48),
            ValueError,
            r"alignment: expected a power of two",
        ),
        (
            "bridge-cached-alignment",
            lambda: tb.Buffer(16, 4096, cached=True),
            ValueError,
            r"alignment: the caching allocator",
        ),
        (
            "bridge-absurd-size",
            lambda: tb.Buffer(1 << 60),
            MemoryError,
            r"cannot allocate 1152921504606846976 bytes",
        ),
        (
            "bridge-absurd-shape",
            lambda: tb.Buffer.empty((1 << 40, 1 << 40), "float64"),
            MemoryError,
            r"shape: .*too large",
        ),
        (
            "bridge-from-list-strings",
            lambda: tb.Buffer.from_list([1.0, "x"]),
            TypeError,
            r"values: expected numbers",
        ),
        (
            "bridge-list-length",
            lambda: tb.vector_add_list([1.0, 2.0], [1.0]),
            ValueError,
            r"b: expected length 2",
        ),
        (
            "bridge-dlpack-stream",
            lambda: tb.Buffer.empty(3).__dlpack__(stream=1),
            ValueError,
            r"stream: expected None",
        ),
        (
            "bridge-dlpack-device",
            lambda: tb.Buffer.empty(3).__dlpack__(dl_device=(2, 0)),
            BufferError,
            r"dl_device: only",
        ),
        ("bridge-as-buffer-none", lambda: tb.as_buffer(None), TypeError, r"obj: expected an array"),
    ]


def torch_cases():
    import tierkit_torch  # noqa: F401
    import torch

    ops = torch.ops.tierkit
    a = torch.randn(2, 3)
    return [
        (
            "torch-int-dtype",
            lambda: ops.custom_add(a.int(), a.int()),
            RuntimeError,
            r"custom_add: a: expected dtype .* got int32",
        ),
        (
            "torch-int64",
            lambda: ops.mul(a.long(), a.long()),
            RuntimeError,
            r"mul: a: expected dtype .* got int64",
        ),
        (
            "torch-bool",  # bool + bool promotes to bool, a result the kernels do not compute
            lambda: ops.custom_add(a > 0, a > 0),
            RuntimeError,
            r"custom_add: a: expected dtype .* got bool",
        ),
        (
            "torch-complex",
            lambda: ops.muladd(a.cfloat(), a.cfloat(), 1.0),
            RuntimeError,
            r"muladd: a: expected dtype .*complex64",
        ),
        (
            "torch-integer-result",  # int32 and int64 promote to int64 (mixed floats promote and compute)
            lambda: ops.mul(a.int(), a.long()),
            RuntimeError,
            r"mul: a: expected dtype float32, float64, float16 or bfloat16, got int32",
        ),
        (
            "torch-shape-mismatch",
            lambda: ops.custom_add(a, a.t()),
            RuntimeError,
            r"custom_add: b: expected a shape that broadcasts with \[2, 3\] \(a\), got \[3, 2\]",
        ),
        (
            "torch-device-mismatch",
            lambda: ops.custom_add(a, a.to("meta")),
            RuntimeError,
            r"b: expected device cpu \(same as a\), got meta",
        ),
        ("torch-none", lambda: ops.custom_add(a, None), (TypeError, RuntimeError), r"(?i)tensor"),
        ("torch-python-scalar", lambda: ops.mul(a, 2.0), (TypeError, RuntimeError), r"(?i)tensor"),
        ("torch-numpy-array", lambda: ops.mul(a, a.numpy()), (TypeError, RuntimeError), r"(?i)tensor"),
        (
            "torch-alpha-string",
            lambda: ops.scale_shift(a, "two", 1.0),
            (TypeError, RuntimeError),
            r"(?i)(float|double|scalar)",
        ),
        (
            "torch-out-shape",
            lambda: ops.add_out(a, a, torch.empty(3)),
            RuntimeError,
            r"add_out: out: expected shape \[2, 3\]",
        ),
        (
            "torch-out-dtype",  # a wider float out= is written cast, as aten does; an int one cannot be
            lambda: ops.add_out(a, a, torch.empty(2, 3, dtype=torch.int64)),
            RuntimeError,
            r"add_out: out: expected a dtype the result \(float32\) can be cast to, got int64",
        ),
        (
            "torch-out-device",
            lambda: ops.add_out(a, a, torch.empty(2, 3, device="meta")),
            RuntimeError,
            r"add_out: out: expected device cpu \(the inputs'\), got meta",
        ),
        (
            "torch-out-expanded",
            lambda: ops.add_out(a, a, torch.empty(1, 3).expand(2, 3)),
            RuntimeError,
            r"add_out: out: has internal overlap",
        ),
        (
            "torch-out-partial-overlap",
            lambda: (lambda base: ops.add_out(base[:6], base[:6].clone(), base[1:7]))(torch.randn(8)),
            RuntimeError,
            r"add_out: out: partially overlaps a",
        ),
        (
            "torch-out-requires-grad",
            lambda: ops.add_out(a.requires_grad_(), a.detach(), torch.empty(2, 3)),
            RuntimeError,
            r"add_out: .*does not support automatic differentiation",
        ),
        (
            "torch-meta-shape",
            lambda: ops.custom_add(torch.empty(2, 3, device="meta"), torch.empty(3, 2, device="meta")),
            RuntimeError,
            r"custom_add: b: expected a shape that broadcasts with \[2, 3\] \(a\), got \[3, 2\]",
        ),
        (
            "torch-meta-int",
            lambda: ops.scale_shift(torch.empty(3, device="meta", dtype=torch.complex64), 1.0, 1.0),
            RuntimeError,
            r"scale_shift: x: expected dtype .* got complex64",
        ),
        (
            "torch-absurd-output",
            lambda: ops.scale_shift(torch.ones(1).expand(1 << 42), 1.0, 1.0),
            (MemoryError, RuntimeError),
            r"(?i)(alloc|memory)",
        ),
        (
            "torch-jit-after-aot",
            lambda: __import__("tierkit_torch.jit", fromlist=["load"]).load(),
            RuntimeError,
            r"already loaded in this process",
        ),
    ]


def all_cases():
    return bridge_cases() + torch_cases()
