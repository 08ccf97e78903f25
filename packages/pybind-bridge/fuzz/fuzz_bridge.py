"""atheris target: the bridge's entry points fed by fuzzer-built producers.

Every call reads an untrusted description of memory: PEP 3118 formats,
shapes, strides and flags (memoryviews, numpy views, ctypes arrays), DLPack
capsules built by hand (legacy and versioned: any ndim, shape, strides, byte
offset, dtype code/bits/lanes, device, flags), and torch tensors with any
view, dtype, neg/conj bit, requires_grad or inference state. The memory a
producer describes is always inside its buffer (a producer that lies about
its bounds cannot be caught by any consumer); everything else is arbitrary.

A finding: a crash or sanitizer report (run under the bridge's ASan build),
an exception other than the documented TypeError/ValueError, or a value
that differs from numpy's (or torch's) on the same inputs.

    python fuzz_bridge.py [libFuzzer flags] [corpus dir]
"""

from __future__ import annotations

import ctypes
import sys
import warnings

import atheris
from tierkit_core.op_table import ROW_REDUCTIONS
from tierkit_core.op_testing import numpy_row_reference

with atheris.instrument_imports():
    import numpy as np
    import tierkit_bridge as tb

try:
    import torch
except ImportError:  # the target runs without torch too, with fewer producers
    torch = None

warnings.simplefilter("ignore")
ALLOWED = (TypeError, ValueError)
NUMPY_DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool", "complex64", ">f4", "<f8"]
FORMATS = [
    "f",
    "d",
    "e",
    "i",
    "b",
    "B",
    "?",
    "q",
    "<f",
    ">f",
    "=d",
    "@e",
    "Zf",
    "x",
    "2f",
    "T{f:a:}",
    "l",
    "P",
]
KEEP: list = []  # every hand-built capsule's memory, kept for the process (the bridge may hold it)


# ---- DLPack by hand --------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Capsuled:
    """A producer whose __dlpack__ returns a hand-built capsule."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return self._device


def dlpack_producer(fdp: atheris.FuzzedDataProvider):
    nbytes = fdp.ConsumeIntInRange(0, 256)
    store = (ctypes.c_uint8 * max(nbytes, 1)).from_buffer_copy(
        fdp.ConsumeBytes(nbytes).ljust(max(nbytes, 1), b"\0")
    )
    ndim = fdp.PickValueInList([0, 1, 1, 2, 2, 3, 4, 8, 9, 40, -1])
    n = max(ndim, 0)
    shape = (ctypes.c_int64 * max(n, 1))(*[fdp.PickValueInList([0, 1, 2, 3, 5, -1, 2**62]) for _ in range(n)])
    with_strides = fdp.ConsumeBool()
    strides = (ctypes.c_int64 * max(n, 1))(*[fdp.ConsumeIntInRange(-9, 9) for _ in range(n)])
    code = fdp.PickValueInList([0, 1, 2, 2, 2, 4, 5, 6, 10, 17, 200])
    bits = fdp.PickValueInList([8, 16, 32, 64, 1, 4, 128, 0])
    lanes = fdp.PickValueInList([1, 1, 1, 2, 0])
    device = fdp.PickValueInList([1, 1, 1, 2, 3, 13, 0, 99])
    offset = fdp.PickValueInList([0, 0, 1, 4, 8, 2**63])
    t = DLTensor(
        ctypes.cast(store, ctypes.c_void_p),
        DLDevice(device, fdp.ConsumeIntInRange(0, 2)),
        ndim,
        DLDataType(code, bits, lanes),
        ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)) if with_strides else None,
        offset,
    )
    if not _fits(t, nbytes, n, shape, strides if with_strides else None):
        return None  # a producer lying about its bounds: out of scope (see the module's docstring)
    if fdp.ConsumeBool():
        m = DLManagedTensorVersioned(
            DLPackVersion(fdp.PickValueInList([1, 1, 0, 2]), 0),
            None,
            None,
            fdp.PickValueInList([0, 1, 2, 3]),
            t,
        )
        name = b"dltensor_versioned"
    else:
        m = DLManagedTensor(t, None, None)
        name = b"dltensor"
    KEEP.append((store, shape, strides, m))
    return Capsuled(_capsule_new(ctypes.addressof(m), name, None), (device, 0))


def _fits(t, nbytes, n, shape, strides):
    """Whether every element the descriptor names lies in the store (or it names none)."""
    sizes = [shape[i] for i in range(n)]
    if any(s < 0 for s in sizes) or t.ndim < 0:
        return True  # refused by any sane consumer before reading: fuzz it
    if any(s == 0 for s in sizes):
        return True
    item = max(t.dtype.bits * max(t.dtype.lanes, 1) // 8, 1)
    if any(s > 64 for s in sizes) or t.byte_offset > nbytes:
        return False
    if strides is None:
        count = 1
        for s in sizes:
            count *= s
        lo, hi = 0, (count - 1) * item
    else:
        lo = sum(min(0, (s - 1) * st) for s, st in zip(sizes, [strides[i] for i in range(n)])) * item
        hi = sum(max(0, (s - 1) * st) for s, st in zip(sizes, [strides[i] for i in range(n)])) * item
    return t.byte_offset + lo >= 0 and t.byte_offset + hi + item <= nbytes


# ---- buffer-protocol and torch producers ------------------------------------------


def numpy_producer(fdp):
    dtype = np.dtype(fdp.PickValueInList(NUMPY_DTYPES))
    base = np.frombuffer(
        fdp.ConsumeBytes(dtype.itemsize * 64).ljust(dtype.itemsize * 64, b"\0"), dtype
    ).copy()
    rank = fdp.ConsumeIntInRange(0, 3)
    shape = [fdp.ConsumeIntInRange(0, 4) for _ in range(rank)]
    steps = [fdp.ConsumeIntInRange(-3, 3) for _ in range(rank)]
    start = fdp.ConsumeIntInRange(0, 63)
    lo = start + sum(min(0, (s - 1) * st) for s, st in zip(shape, steps) if s > 0)
    hi = start + sum(max(0, (s - 1) * st) for s, st in zip(shape, steps) if s > 0)
    if 0 in shape:
        lo, hi = start, start
    if lo < 0 or hi >= 64:
        return None
    view = np.lib.stride_tricks.as_strided(
        base[start:], shape=shape, strides=[st * dtype.itemsize for st in steps], writeable=fdp.ConsumeBool()
    )
    return view


def memoryview_producer(fdp):
    fmt = fdp.PickValueInList(FORMATS)
    raw = bytearray(fdp.ConsumeBytes(64).ljust(64, b"\0"))
    try:
        mv = memoryview(raw).cast("B")
        size = ctypes.sizeof(ctypes.c_double) if fmt in ("d", "=d", "q", "<f8", "P", "l") else 4
        if fmt in ("e", "@e"):
            size = 2
        if fmt in ("b", "B", "?", "x"):
            size = 1
        n = 64 // size
        shape = fdp.PickValueInList([[n], [2, n // 2], [n // 4, 2, 2], []])
        return mv.cast(fmt, shape) if shape else mv.cast(fmt)
    except (TypeError, ValueError):
        return None


def torch_producer(fdp):
    if torch is None:
        return None
    dtype = fdp.PickValueInList(
        [
            torch.float32,
            torch.float64,
            torch.float16,
            torch.bfloat16,
            torch.int32,
            torch.bool,
            torch.complex64,
        ]
        + ([torch.float8_e4m3fn] if hasattr(torch, "float8_e4m3fn") else [])
    )
    storage = torch.zeros(64, dtype=torch.float32).to(dtype)
    rank = fdp.ConsumeIntInRange(0, 3)
    shape = [fdp.ConsumeIntInRange(0, 4) for _ in range(rank)]
    strides = [fdp.ConsumeIntInRange(0, 4) for _ in range(rank)]  # torch strides are never negative
    offset = fdp.ConsumeIntInRange(0, 63)
    reach = offset + sum((s - 1) * st for s, st in zip(shape, strides) if s > 0)
    if 0 not in shape and reach >= 64:
        return None
    t = torch.as_strided(storage, shape, strides, offset)
    choice = fdp.ConsumeIntInRange(0, 5)
    if choice == 1 and dtype.is_floating_point:
        t = t.detach().requires_grad_()
    elif choice == 2:
        t = torch._neg_view(t) if dtype != torch.bool else t
    elif choice == 3 and dtype.is_complex:
        t = t.conj()
    elif choice == 4:
        with torch.inference_mode():
            t = t.clone()
    elif choice == 5:
        t = torch.empty(shape, dtype=dtype, device="meta")
    return t


class _Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_float)]


def ctypes_producer(fdp):
    """ctypes arrays export PEP 3118 formats numpy rarely does: '<f', 'T{<f:a:<f:b:}', nested shapes."""
    kind = fdp.ConsumeIntInRange(0, 3)
    n = fdp.ConsumeIntInRange(0, 8)
    if kind == 0:
        return (ctypes.c_float * n)(*[fdp.ConsumeRegularFloat() for _ in range(n)])
    if kind == 1:
        return ((ctypes.c_double * 2) * n)()
    if kind == 2:
        return (_Pair * n)()
    return (ctypes.c_int16 * n)()


PRODUCERS = [
    numpy_producer,
    numpy_producer,
    memoryview_producer,
    ctypes_producer,
    dlpack_producer,
    torch_producer,
]


def produce(fdp):
    try:
        return fdp.PickValueInList(PRODUCERS)(fdp)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None  # the producer itself refused the layout: nothing to hand the bridge


# ---- the calls and their references --------------------------------------------------


def _numpy_reference(op, a, b):
    with np.errstate(all="ignore"):
        na, nb = np.asarray(a), np.asarray(b)
        return {"add": np.add, "mul": np.multiply}[op](na, nb)


def check_pointwise(fdp, a, b):
    op = fdp.PickValueInList(["add", "mul", "silu_mul", "scale_shift", "muladd"])
    use_out = fdp.ConsumeBool()
    try:
        if op == "scale_shift":
            got = tb.scale_shift(a, 1.5, -0.25)
        elif op == "muladd":
            got = tb.muladd(a, b, 0.5)
        elif use_out and isinstance(a, np.ndarray) and a.flags.writeable:
            got = getattr(tb, op)(a, b, out=a)
            return  # in place: the reference would read the written values
        else:
            got = getattr(tb, op)(a, b)
    except ALLOWED:
        return
    if op in ("add", "mul") and isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.dtype.kind in "fc" and b.dtype.kind in "fc" and a.dtype.isnative and b.dtype.isnative:
            try:
                want = _numpy_reference(op, a, b)
            except ALLOWED:
                return
            np.testing.assert_array_equal(np.asarray(got), want)


def check_rows(fdp, x):
    # An entry of the op table's row reductions; its parameters: each none or
    # a fresh one, the weight (with out=) possibly a row of out itself; out:
    # none, a fresh C-order array, its transpose's transpose (strided), or x.
    entry = ROW_REDUCTIONS[fdp.ConsumeIntInRange(0, len(ROW_REDUCTIONS) - 1)]
    params = [None] * len(entry.params)
    out = None
    if isinstance(x, np.ndarray) and x.ndim and x.dtype.kind == "f" and x.dtype.isnative:
        d = x.shape[-1]
        for i in range(len(params)):
            if fdp.ConsumeBool():
                params[i] = np.frombuffer(
                    fdp.ConsumeBytes(x.dtype.itemsize * d).ljust(x.dtype.itemsize * d, b"\0"), x.dtype
                )
        mode = fdp.ConsumeIntInRange(0, 3)
        if mode == 1:
            out = np.empty_like(x, order="C")
        elif mode == 2:
            out = np.empty(x.shape[::-1], x.dtype).T  # strided
        elif mode == 3 and x.flags.writeable:
            out = x
        weight = params[0] if params else None
        if out is not None and out is not x and weight is not None and out.flags.c_contiguous and out.size:
            if fdp.ConsumeBool():  # the weight lies in out: read as it was at the call
                row = out.reshape(-1, d)[0]
                row[...] = weight
                params[0] = row
    axis = -1  # an entry along an axis: any of x's, when x is an array with one
    if entry.has_dim and isinstance(x, np.ndarray) and x.ndim:
        axis = fdp.ConsumeIntInRange(-x.ndim, x.ndim - 1)
    x_before = np.array(x, copy=True) if isinstance(x, np.ndarray) else None
    before = [None if p is None else np.array(p, copy=True) for p in params]
    try:
        got = getattr(tb, entry.name)(x, *params, axis if entry.has_dim else 1e-6, out=out)
    except ALLOWED:
        return
    if x_before is not None and not (out is not None and _has_internal_overlap(out)):
        # Against numpy on the values the arguments had at the call. (An out
        # whose elements share addresses holds whichever write came last, in
        # the bridge as in numpy: no value to check.)
        if x_before.ndim and entry.has_dim:  # the rows along the axis, as the last axis's
            x_before, got = np.moveaxis(x_before, axis, -1), np.moveaxis(np.asarray(got), axis, -1)
        _compare_rows(entry, x_before, before, got)


def _has_internal_overlap(a) -> bool:
    if a.size <= 1:
        return False
    offsets = sum(i * s for i, s in zip(np.indices(a.shape), a.strides))
    return len(np.unique(offsets)) < a.size


def _compare_rows(entry, x, params, got):
    if x.dtype not in (np.float32, np.float64) or not x.size or not x.ndim:
        return
    # No float32 sum of squares may overflow (the kernel's rstd is then 0).
    for a in (x, *(p for p in params if p is not None)):
        if not np.isfinite(a).all() or np.abs(a).max() >= 1e15:
            return
    wide = np.float64
    want = numpy_row_reference(np, entry, x, params, 1e-6, wide)
    # The normalised rows' largest magnitude bounds their cancellation
    # (a mean-centred kind's x - mean); each element's error is a few units of it,
    # scaled by its weight, plus its own.
    xhat = numpy_row_reference(np, entry, x, [None] * len(params), 1e-6, wide)
    scale = np.abs(xhat).max(-1, keepdims=True) if xhat.size else 0.0
    w = 1.0 if not params or params[0] is None else np.abs(params[0].astype(wide))
    b = 0.0 if len(params) < 2 or params[1] is None else np.abs(params[1].astype(wide))
    g = np.asarray(got).astype(wide)
    tol = 1e-5 * (np.abs(want) + scale * w + b) + 1e-30
    finite = np.isfinite(want)
    assert (np.abs(g - want)[finite] <= np.broadcast_to(tol, want.shape)[finite]).all(), (
        entry.name,
        x,
        params,
        got,
    )


def TestOneInput(data: bytes) -> None:
    KEEP.clear()  # the last input's capsules: nothing of the bridge's holds them past its call
    fdp = atheris.FuzzedDataProvider(data)
    a = produce(fdp)
    if a is None:
        return
    b = a if fdp.ConsumeBool() else produce(fdp)
    if b is None:
        return
    what = fdp.ConsumeIntInRange(0, 2)
    try:
        if what == 0:
            check_pointwise(fdp, a, b)
        elif what == 1:
            check_rows(fdp, a)
        else:
            tb.as_buffer(a)
    except ALLOWED:
        pass


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
