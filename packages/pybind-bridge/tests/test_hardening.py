"""Inputs that used to crash, hang or write what must not be written.

Every buffer producer case runs in a child process, so a crash is a failed
test (with its exit signal) rather than a dead test run.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import subprocess
import sys

import numpy as np
import pytest
import tierkit_bridge as tb

# (code building `x`, expected: a list of floats for scale_shift(x, 2, 1), or an exception name)
PRODUCERS = {
    "ctypes float array": ("x = (ctypes.c_float * 3)(1, 2, 3)", [3, 5, 7]),
    "ctypes double array": ("x = (ctypes.c_double * 3)(1, 2, 3)", [3, 5, 7]),
    "ctypes 2-d float array": ("x = ((ctypes.c_float * 2) * 2)((1, 2), (3, 4))", [3, 5, 7, 9]),
    "ctypes float scalar": ("x = ctypes.c_float(1.5)", [4]),
    "ctypes int array": ("x = (ctypes.c_int * 3)(1, 2, 3)", "TypeError"),
    "ctypes structure": (
        "class S(ctypes.Structure):\n    _fields_ = [('a', ctypes.c_float), ('b', ctypes.c_int)]\nx = S()",
        "TypeError",
    ),
    "ctypes bool array": ("x = (ctypes.c_bool * 2)()", "TypeError"),
    "memoryview cast with shape": (
        "x = memoryview(array.array('f', range(6))).cast('B').cast('f', (2, 3))",
        [1, 3, 5, 7, 9, 11],
    ),
    "mmap-backed numpy": (
        "m = mmap.mmap(-1, 16)\nx = np.frombuffer(m, np.float32)\nx[:] = [1, 2, 3, 4]",
        [3, 5, 7, 9],
    ),
    "bytes": ("x = b'abcd'", "TypeError"),
    "bytearray": ("x = bytearray(8)", "TypeError"),
    "misaligned numpy view": ("x = np.frombuffer(bytes(17), np.float32, count=4, offset=1)", "ValueError"),
    # numpy converts a non-native byte order (np.add does): so does the bridge.
    "big-endian numpy": ("x = np.arange(3, dtype='>f4')", [1, 3, 5]),
    "big-endian memoryview": ("x = memoryview(np.arange(3, dtype='>f4'))", "ValueError"),
    "little-endian numpy": ("x = np.arange(3, dtype='<f4')", [1, 3, 5]),
    "native numpy": ("x = np.arange(3, dtype='=f8')", [1, 3, 5]),
    "negative-stride numpy": ("x = np.arange(4, dtype=np.float32)[::-1]", [7, 5, 3, 1]),
    "__dlpack__ returning an int": (
        "class P:\n    def __dlpack__(self, **kw): return 3\n    def __dlpack_device__(self): return (1, 0)\nx = P()",
        "TypeError",
    ),
    "__dlpack__ raising": (
        "class P:\n    def __dlpack__(self, **kw): raise RuntimeError('boom')\nx = P()",
        "ValueError",
    ),
    "__dlpack_device__ on cuda": (
        "class P:\n    def __dlpack__(self, **kw): return None\n    def __dlpack_device__(self): return (2, 0)\nx = P()",
        "ValueError",
    ),
}
PRODUCERS.update(
    {
        f"array.array('{code}')": (
            f"x = array.array('{code}', {'ab' if code == 'u' else [1, 2]!r})",
            [3, 5] if code in "fd" else "TypeError",
        )
        for code in "bBuhHiIlLqQfd"
    }
)

CHILD = """
import array, ctypes, mmap, sys
import numpy as np
import tierkit_bridge as tb
{setup}
try:
    y = tb.scale_shift(x, 2.0, 1.0)
    print("OK", np.asarray(y, dtype=np.float64).ravel().tolist())
except Exception as e:
    print("RAISED", type(e).__name__, e)
"""


@pytest.mark.parametrize("case", sorted(PRODUCERS))
def test_every_producer_gets_a_result_or_a_clear_error(case):
    setup, expected = PRODUCERS[case]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(setup=setup)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"child crashed (rc={proc.returncode}): {proc.stderr[-2000:]}"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(("OK ", "RAISED ")))
    if isinstance(expected, str):
        assert line.startswith(f"RAISED {expected} "), line
        assert len(line) > len(f"RAISED {expected} ") + 10, f"error without a message: {line}"
    else:
        assert line == f"OK {[float(v) for v in expected]}", line


def _add_in_child(queue):
    x = np.ones(200_000, np.float32)
    queue.put(float(np.asarray(tb.add(x, x)).sum()))


def test_forked_worker_after_parallel_parent_work():
    x = np.ones(200_000, np.float32)
    assert float(np.asarray(tb.add(x, x)).sum()) == 400_000.0  # the parent's pool is busy-capable
    ctx = multiprocessing.get_context("fork")
    for _ in range(3):
        queue = ctx.Queue()
        child = ctx.Process(target=_add_in_child, args=(queue,))
        child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            pytest.fail("the forked child hung in tierkit_bridge.add")
        assert child.exitcode == 0
        assert queue.get(timeout=5) == 400_000.0


def test_dataloader_with_forked_workers():
    torch = pytest.importorskip("torch")

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            x = np.full(100_000, float(i), np.float32)
            return torch.from_numpy(np.asarray(tb.scale_shift(x, 2.0, 1.0))).sum()

    np.asarray(tb.add(np.ones(200_000, np.float32), np.ones(200_000, np.float32)))
    loader = torch.utils.data.DataLoader(
        Data(), num_workers=2, multiprocessing_context="fork", timeout=60, batch_size=None
    )
    got = sorted(float(v) for v in loader)
    assert got == [float((2 * i + 1) * 100_000) for i in range(8)]


READ_ONLY = "memoryview(b'abcdefgh').cast('f')"


def test_legacy_dlpack_of_read_only_memory_is_refused():
    buf = tb.as_buffer(memoryview(b"abcdefgh").cast("f"))
    assert buf.readonly
    with pytest.raises(BufferError, match="read-only"):
        buf.__dlpack__()


def _capsule_flags(capsule) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get(capsule, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, then flags (u64).
    return ctypes.c_uint64.from_address(address + 8 + 8 + 8).value


def test_versioned_dlpack_flags_read_only_and_copies():
    buf = tb.as_buffer(memoryview(b"abcdefgh").cast("f"))
    assert _capsule_flags(buf.__dlpack__(max_version=(1, 0))) & 1 == 1  # READ_ONLY
    assert not np.from_dlpack(buf).flags.writeable
    copied = _capsule_flags(buf.__dlpack__(max_version=(1, 0), copy=True))
    assert copied & 2 == 2 and copied & 1 == 0  # IS_COPIED, and the copy is writable
    writable = tb.Buffer.empty(3)
    assert _capsule_flags(writable.__dlpack__(max_version=(1, 0))) == 0


def test_capsule_destructor_keeps_a_propagating_exception():
    buf = tb.Buffer.empty(4)

    class Producer:
        cap = None

        def __dlpack__(self, **kwargs):
            self.cap = buf.__dlpack__(**kwargs)
            return self.cap

    producer = Producer()
    tb.as_buffer(producer)  # consumes the capsule: it is renamed "used_..."

    def fail_while_capsule_dies():
        held = producer.cap
        producer.cap = None
        assert held is not None
        raise KeyError("must survive the capsule's destructor")

    with pytest.raises(KeyError, match="must survive"):
        fail_while_capsule_dies()


def test_misaligned_input_is_refused_with_addresses():
    x = np.frombuffer(bytes(17), np.float32, count=4, offset=1)
    with pytest.raises(
        ValueError, match=r"x: data at address 0x[0-9a-f]+ is aligned to 1 byte\(s\); float32 elements need 4"
    ):
        tb.scale_shift(x, 2.0, 1.0)
    aligned = np.frombuffer(bytes(20), np.float32, count=4, offset=4)
    np.testing.assert_array_equal(np.asarray(tb.scale_shift(aligned, 2.0, 1.0)), np.ones(4, np.float32))


def test_out_torch_tensor_bumps_its_version_for_autograd():
    torch = pytest.importorskip("torch")
    a = torch.ones(3, requires_grad=True)
    b = a.exp()  # exp saves its output for backward
    before = b._version
    tb.scale_shift(b.detach(), 2.0, 1.0, out=b.detach())
    assert b._version == before + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()
    # numpy outputs are untouched by this (no torch involved)
    out = np.empty(3, np.float32)
    tb.add(np.ones(3, np.float32), np.ones(3, np.float32), out=out)
    np.testing.assert_array_equal(out, [2, 2, 2])


def test_absurd_sizes_and_strides_are_clear_errors_not_overflow():
    with pytest.raises(ValueError, match="overflows int64"):
        tb.Buffer.empty((0, 1 << 62, 1 << 62))  # no memory, but its strides do not fit
    with pytest.raises(MemoryError, match="too large to allocate"):
        tb.Buffer.empty((1 << 62, 1 << 62))
    from numpy.lib.stride_tricks import as_strided

    x = as_strided(np.zeros(4, np.float32), shape=(3, 3), strides=(1 << 61, 1 << 61))
    with pytest.raises(ValueError, match="x: strides: .* overflows int64"):
        tb.scale_shift(x, 2.0, 1.0)
