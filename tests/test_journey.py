"""A buffer's whole journey: born in core, seen by numpy (buffer protocol),
by torch (DLPack), written by a tierkit op through `out=`, read back by numpy.
One allocation the whole way, checked at every hop; the owner is dropped at
each point of the journey (run under ASan by the sanitize session)."""

import gc

import numpy as np
import pytest
import tierkit_bridge as tb
import tierkit_torch
import torch

N = 4096


def np_ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("drop_owner_after", ["numpy", "torch", "op", "never"])
def test_one_allocation_from_core_to_torch_op_and_back(drop_owner_after):
    buf = tb.Buffer.empty(N, "float32")
    ptr = buf.data_ptr

    arr = np.asarray(buf)  # hop 1: buffer protocol
    assert np_ptr(arr) == ptr
    arr[:] = np.arange(N, dtype=np.float32)
    if drop_owner_after == "numpy":
        del buf
        gc.collect()

    t = torch.from_dlpack(arr)  # hop 2: numpy -> torch through DLPack
    assert t.data_ptr() == ptr
    if drop_owner_after == "torch":
        del buf
        gc.collect()

    tierkit_torch.add_out(t, t, t)  # hop 3: a tierkit op writing into the same memory
    assert t.data_ptr() == ptr
    if drop_owner_after == "op":
        del buf
        gc.collect()

    back = np.asarray(arr)  # hop 4: read back through numpy
    assert np_ptr(back) == ptr
    np.testing.assert_array_equal(back, 2 * np.arange(N, dtype=np.float32))
    # and through the bridge's own op, in place, still the same memory
    tb.scale_shift(back, 0.5, 1.0, out=back)
    np.testing.assert_array_equal(t.numpy(), np.arange(N, dtype=np.float32) + 1)


def test_torch_memory_through_the_bridge_and_back():
    t = torch.arange(1000, dtype=torch.float64)
    b = tb.as_buffer(t)  # DLPack import, kept alive by the Buffer
    assert b.data_ptr == t.data_ptr()
    arr = np.asarray(b)
    out = tb.muladd(arr, arr, 1.0, out=arr)
    assert np_ptr(out) == t.data_ptr()
    del t
    gc.collect()
    back = torch.from_dlpack(b)
    torch.testing.assert_close(back, torch.arange(1000, dtype=torch.float64) ** 2 + 1, rtol=0, atol=0)


def test_bfloat16_journey_core_to_torch():
    buf = tb.Buffer.empty((8, 8), "bfloat16")
    t = torch.from_dlpack(buf)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == buf.data_ptr
    t.copy_(torch.arange(64, dtype=torch.float32).reshape(8, 8))
    out = torch.ops.tierkit.scale_shift(t, 2.0, 0.0)
    tb.scale_shift(buf, 2.0, 0.0, out=buf)  # bridge on the same memory
    torch.testing.assert_close(t, out, rtol=0, atol=0)


def test_cached_buffer_journey_returns_block_to_the_cache():
    tb.allocator.release_cached()
    before = tb.allocator.stats()
    buf = tb.Buffer.empty(N, "float32", cached=True)
    t = torch.from_dlpack(buf)
    torch.ops.tierkit.add_out(t, t, t)
    del buf
    gc.collect()
    assert tb.allocator.stats()["bytes_in_use"] > before["bytes_in_use"]  # torch still holds it
    del t
    gc.collect()
    assert tb.allocator.stats()["bytes_in_use"] == before["bytes_in_use"]
