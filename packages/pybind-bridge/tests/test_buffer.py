"""tierkit_bridge.Buffer: construction, buffer protocol, DLPack, lifetime."""

import gc

import numpy as np
import pytest
import tierkit_bridge as tb

try:
    import torch
except ImportError:  # pragma: no cover - exercised where torch is absent
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def test_raw_bytes_buffer_is_aligned_and_writable():
    b = tb.Buffer(100)
    assert b.nbytes == 100 and b.shape == (100,) and b.dtype == "uint8"
    assert b.alignment == 64 and b.data_ptr % 64 == 0
    m = memoryview(b)
    assert m.format == "B" and not m.readonly and m.nbytes == 100
    m[0] = 7
    assert np.asarray(b)[0] == 7


@pytest.mark.parametrize("alignment", [8, 16, 128, 4096])
def test_requested_alignment(alignment):
    b = tb.Buffer(10, alignment)
    assert b.alignment == alignment and b.data_ptr % alignment == 0


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_bad_alignment_is_a_value_error(alignment):
    with pytest.raises(ValueError, match=rf"alignment: expected a power of two .*got {alignment}"):
        tb.Buffer(10, alignment)


def test_negative_size_is_refused():
    with pytest.raises(TypeError):
        tb.Buffer(-1)
    with pytest.raises(ValueError, match="shape: expected non-negative sizes, got -2"):
        tb.Buffer.empty((3, -2))


def test_impossible_allocation_is_memory_error():
    with pytest.raises(MemoryError, match="cannot allocate 1152921504606846976 bytes"):
        tb.Buffer(1 << 60)
    with pytest.raises(MemoryError):
        tb.Buffer.empty((1 << 40, 1 << 40), "float64")


@pytest.mark.parametrize(
    ("dtype", "fmt", "np_dtype"),
    [
        ("float32", "f", np.float32),
        ("float64", "d", np.float64),
        ("float16", "e", np.float16),
        ("int32", "i", np.int32),
        ("int64", "q", np.int64),
    ],
)
def test_empty_exports_shape_strides_format(dtype, fmt, np_dtype):
    b = tb.Buffer.empty((2, 3, 4), dtype)
    m = memoryview(b)
    assert m.format == fmt and m.shape == (2, 3, 4) and m.itemsize == np.dtype(np_dtype).itemsize
    arr = np.asarray(b)
    assert arr.dtype == np_dtype and arr.shape == (2, 3, 4)
    assert arr.strides == b.strides == tuple(s * arr.itemsize for s in (12, 4, 1))
    assert address(arr) == b.data_ptr  # zero-copy
    assert arr.flags.writeable


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32")])
def test_dtype_spellings(dtype):
    assert tb.Buffer.empty(3, dtype).dtype == "float32"


@needs_torch
def test_torch_dtype_spelling():
    assert tb.Buffer.empty(3, torch.bfloat16).dtype == "bfloat16"


def test_unknown_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="dtype: expected one of float32.*got 'complex64'"):
        tb.Buffer.empty(3, "complex64")


def test_bad_shape_types():
    with pytest.raises(TypeError, match="shape: expected an int or a sequence of ints, got float"):
        tb.Buffer.empty(2.5)
    with pytest.raises(TypeError, match="shape: expected a sequence of ints, got element 'a'"):
        tb.Buffer.empty((2, "a"))
    with pytest.raises(ValueError, match="shape: expected at most 8 dimensions"):
        tb.Buffer.empty((1,) * 9)


def test_zero_size_and_zero_dim():
    e = tb.Buffer.empty((0, 5))
    assert np.asarray(e).shape == (0, 5) and e.size == 0
    s = tb.Buffer.empty(())
    arr = np.asarray(s)
    assert arr.shape == () and s.size == 1
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d Buffer"):
        len(s)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64"])
def test_from_list_matches_numpy(dtype):
    values = [1, 2.5, -3, 1e3, 0.1]
    if dtype.startswith("int"):
        values = [1, 2, -3, 1000, 0]
    b = tb.Buffer.from_list(values, dtype)
    np.testing.assert_array_equal(np.asarray(b), np.array(values, dtype=dtype))


def test_from_list_rejects_non_numbers():
    with pytest.raises(TypeError, match="values: expected numbers, got str at index 1"):
        tb.Buffer.from_list([1.0, "x"])


def test_bfloat16_has_no_buffer_format_but_exports_dlpack():
    b = tb.Buffer.empty(4, "bfloat16")
    with pytest.raises(BufferError) as info:
        memoryview(b)
    # pybind11 wraps the reason as the cause of a generic "Error getting buffer".
    assert "bfloat16 has no buffer-protocol format" in str(info.value.__cause__)
    assert not hasattr(np, "bfloat16")
    if torch is not None:
        t = torch.from_dlpack(b)
        assert t.dtype == torch.bfloat16 and t.data_ptr() == b.data_ptr


def test_numpy_view_outlives_the_buffer():
    b = tb.Buffer.empty(1000, "float64")
    arr = np.asarray(b)
    arr[:] = np.arange(1000)
    del b
    gc.collect()
    np.testing.assert_array_equal(arr, np.arange(1000))  # under ASan: no use-after-free
    arr += 1
    assert arr[-1] == 1000


def test_memoryview_outlives_the_buffer():
    b = tb.Buffer.from_list([1.0, 2.0, 3.0], "float32")
    m = memoryview(b)
    del b
    gc.collect()
    assert m.tolist() == [1.0, 2.0, 3.0]


def test_numpy_from_dlpack_shares_memory_and_outlives_owner():
    b = tb.Buffer.from_list([1.0, 2.0, 3.0], "float64")
    arr = np.from_dlpack(b)
    assert address(arr) == b.data_ptr
    del b
    gc.collect()
    np.testing.assert_array_equal(arr, [1.0, 2.0, 3.0])


def test_dlpack_device_and_capsule_kinds():
    b = tb.Buffer.empty(3)
    assert b.__dlpack_device__() == (1, 0)
    assert "dltensor" in repr(b.__dlpack__())
    assert "dltensor_versioned" in repr(b.__dlpack__(max_version=(1, 0)))


def test_unconsumed_capsules_free_their_context():
    # Each capsule's context holds a reference to the storage; a capsule
    # nobody consumed must run the deleter when it dies, or the cached
    # block stays "in use" forever. (LSan is off for the Python tiers, so
    # this counts instead.)
    gc.collect()
    before = tb.allocator.stats()["bytes_in_use"]
    b = tb.Buffer.empty(1000, "float32", cached=True)
    for _ in range(100):
        b.__dlpack__(max_version=(1, 0))
        b.__dlpack__()
    assert tb.allocator.stats()["bytes_in_use"] == before + 4096
    del b
    gc.collect()
    assert tb.allocator.stats()["bytes_in_use"] == before


def test_dlpack_rejects_a_stream_and_a_foreign_device():
    b = tb.Buffer.empty(3)
    with pytest.raises(ValueError, match="stream: expected None for a CPU buffer, got 1"):
        b.__dlpack__(stream=1)
    with pytest.raises(BufferError, match=r"dl_device: only \(1, 0\)"):
        b.__dlpack__(dl_device=(2, 0))


def test_dlpack_copy_true_copies():
    b = tb.Buffer.from_list([1.0, 2.0], "float32")
    arr = np.from_dlpack(b, copy=True)
    assert address(arr) != b.data_ptr
    np.testing.assert_array_equal(arr, [1.0, 2.0])


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_torch_from_dlpack_shares_memory(dtype):
    b = tb.Buffer.empty((4, 5), dtype)
    t = torch.from_dlpack(b)
    assert t.data_ptr() == b.data_ptr and t.shape == (4, 5) and str(t.dtype) == f"torch.{dtype}"
    t.fill_(2.0)
    back = torch.from_dlpack(tb.as_buffer(t))
    assert back.data_ptr() == t.data_ptr()
    del b
    gc.collect()
    assert float(t.sum()) == 40.0


def test_as_buffer_shares_strided_numpy_memory_and_keeps_it_alive(rng):
    base = rng.standard_normal((6, 8)).astype(np.float32)
    view = base[1::2, ::-3]  # strided, negative step
    b = tb.as_buffer(view)
    assert b.shape == view.shape and b.strides == view.strides
    assert b.data_ptr == address(view)
    del base, view
    gc.collect()
    arr = np.asarray(b)
    assert arr.shape == (3, 3)


def test_as_buffer_read_only_source_stays_read_only():
    ro = np.arange(4.0)
    ro.flags.writeable = False
    b = tb.as_buffer(ro)
    assert b.readonly and memoryview(b).readonly


def test_cached_buffers_come_from_the_allocator():
    tb.allocator.release_cached()
    before = tb.allocator.stats()
    b = tb.Buffer(10_000, cached=True)
    assert b.cached
    mid = tb.allocator.stats()
    assert mid["bytes_in_use"] - before["bytes_in_use"] == 16384
    del b
    gc.collect()
    after = tb.allocator.stats()
    assert after["bytes_in_use"] == before["bytes_in_use"]
    assert after["bytes_cached"] >= 16384
    c = tb.Buffer.empty(2500, "float32", cached=True)  # same size class: a hit
    assert tb.allocator.stats()["cache_hits"] == after["cache_hits"] + 1
    del c


def test_cached_buffer_alignment_limit():
    with pytest.raises(ValueError, match="alignment: the caching allocator gives 64-byte alignment"):
        tb.Buffer(10, 4096, cached=True)


def test_a_dlpack_capsule_with_a_negative_size_is_refused():
    # Found by the fuzz session: shape (-1, 2^62) with C-order strides
    # overflowed the extent's arithmetic (UBSan); now a ValueError.
    import ctypes

    class DLTensor(ctypes.Structure):
        _fields_ = [
            ("data", ctypes.c_void_p),
            ("device", ctypes.c_int32 * 2),
            ("ndim", ctypes.c_int32),
            ("dtype", ctypes.c_uint32),  # code, bits (one byte each), lanes (two)
            ("shape", ctypes.POINTER(ctypes.c_int64)),
            ("strides", ctypes.c_void_p),
            ("byte_offset", ctypes.c_uint64),
        ]

    class Managed(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    store = (ctypes.c_float * 4)()
    shape = (ctypes.c_int64 * 2)(-1, 2**62)
    dtype = 2 | (32 << 8) | (1 << 16)  # float32: code 2, 32 bits, 1 lane
    m = Managed(DLTensor(ctypes.addressof(store), (1, 0), 2, dtype, shape, None, 0), None, None)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

    class Producer:
        def __dlpack__(self, **kwargs):
            return new(ctypes.addressof(m), b"dltensor", None)

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(
        ValueError, match=r"^a: shape: expected non-negative sizes, got \(-1, 4611686018427387904\)"
    ):
        tb.add(Producer(), Producer())
