"""Every row function of the bridge (the op table's ROW_REDUCTIONS and
ROW_MAPS: rms_norm, layer_norm, rotary_embedding, and any fused residual
form the bridge exposes) takes numpy arrays in the other byte order ('>f4',
'>f8', '>f2' on a little-endian host) as numpy's ufuncs and the bridge's
pointwise ops do (issue 51 item 7): converted (tierkit_bridge._numpy_rules.native,
the pointwise ops' conversion), the result the native-order call's bits, in
native order; an ``out`` in the other byte order written as numpy writes a
ufunc's (byte-swapped), with out's checks and messages. A new entry is
tested here with no new code."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tierkit_bridge as tb
from tierkit_core.op_table import CASTING_MODES, ROW_MAPS, ROW_REDUCTIONS

DTYPES = pytest.mark.parametrize("dtype", ["f4", "f8", "f2"])
SWAPPED = ">" if np.little_endian else "<"


def swapped(a):
    """a's values in the other byte order."""
    return None if a is None else a.astype(a.dtype.newbyteorder(SWAPPED))


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def native_bits(a):
    """a's values in native order (a byte-swapped out read back)."""
    return a.astype(a.dtype.newbyteorder("="))


class Case:
    """One row function's call: its array arguments in order, the rest as keywords."""

    def __init__(self, name, arrays, **kw):
        self.name, self.arrays, self.kw = name, list(arrays), kw

    def __call__(self, arrays, **extra):
        return getattr(tb, self.name)(*arrays, **self.kw, **extra)

    def __repr__(self):
        return f"{self.name}{tuple(self.kw.items())}"


def cases(dtype):
    """Every row function with every array argument given, on data with a NaN
    and a -0 (bits must survive the swap), in `dtype`."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 5, 16)) * 2).astype(dtype)
    x[0, 0, 3] = np.nan
    x[1, 2, 0] = -0.0
    out = []
    for e in ROW_REDUCTIONS:
        params = [(1.0 if p == "weight" else 0.0) + 0.5 * rng.standard_normal(16) for p in e.params]
        params = [p.astype(dtype) for p in params]
        # Along a moved axis where the entry has one: x's rows gathered from across its rows.
        out.append(Case(e.name, [x, *params], **({"axis": 1} if e.has_dim else {"eps": 1e-5})))
        if e.casting:
            for mode in CASTING_MODES:
                out.append(Case(e.name, [x, *params], eps=1e-5, offset=1.0, casting_mode=mode.name))
        fused = getattr(e, "add_name", None)
        if fused and hasattr(tb, fused):  # the fused residual form, where the bridge has it
            out.append(Case(fused, [x, x[::-1].copy(), *params], eps=1e-5))
    for m in ROW_MAPS:
        tables = [rng.standard_normal((5, 8)).astype(dtype) for _ in m.tables]
        for interleaved in (False, True):
            out.append(Case(m.name, [x, *tables], interleaved=interleaved))
    return out


def ids(dtype):
    return [repr(c) for c in cases(dtype)]


def test_every_row_function_is_covered():
    names = {c.name for c in cases("f4")}
    row_functions = {e.name for e in ROW_REDUCTIONS} | {m.name for m in ROW_MAPS}
    row_functions |= {
        e.add_name for e in ROW_REDUCTIONS if getattr(e, "add_name", None) and hasattr(tb, e.add_name)
    }
    assert names == row_functions


@DTYPES
def test_any_argument_swapped_gives_the_native_calls_bits(dtype):
    for case in cases(dtype):
        want = case(case.arrays)
        assert want.dtype.isnative
        n = len(case.arrays)
        # Each argument alone in the other byte order, then all of them.
        for which in [*([i] for i in range(n)), list(range(n))]:
            args = [swapped(a) if i in which else a for i, a in enumerate(case.arrays)]
            got = case(args)
            assert isinstance(got, np.ndarray) and got.dtype.isnative, (case, which)
            assert same_bits(got, want), (case, which)


@DTYPES
def test_strided_swapped_views_are_read_in_their_layout(dtype):
    for case in cases(dtype):
        x = case.arrays[0]
        big = swapped(np.concatenate([x, x], axis=1))  # x is big[:, ::2] after a reshape
        view = big.reshape(3, 2, 5, 16)[:, 0]  # x's values, rows 2 * 5 * 16 apart
        assert not view.flags.c_contiguous
        t = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)  # a transposed layout
        for arg in (view, swapped(t)):
            assert same_bits(case([arg, *case.arrays[1:]]), case(case.arrays)), case


@DTYPES
def test_swapped_out_is_written_as_numpy_writes_it(dtype):
    for case in cases(dtype):
        want = case(case.arrays)
        for args in (case.arrays, [swapped(a) for a in case.arrays]):
            out = np.full(want.shape, 7, dtype=want.dtype.newbyteorder(SWAPPED))
            got = case(args, out=out)
            assert got is out and out.dtype.byteorder == SWAPPED, case
            assert same_bits(native_bits(out), want), case
        # A swapped out that is a strided view: only its elements are written.
        base = np.full((3, 5, 32), 7, dtype=want.dtype.newbyteorder(SWAPPED))
        case(case.arrays, out=base[..., ::2])
        assert same_bits(native_bits(base[..., ::2]), want), case
        assert (base[..., 1::2] == 7).all(), case


@DTYPES
def test_in_place_on_a_swapped_array(dtype):
    # x and out one byte-swapped array: x is read as it was at the call.
    for case in cases(dtype):
        want = case(case.arrays)
        if want.dtype != case.arrays[0].dtype:
            continue  # a result of another dtype (a casting mode's) cannot be x's array
        xs = swapped(case.arrays[0])
        got = case([xs, *case.arrays[1:]], out=xs)
        assert got is xs and same_bits(native_bits(xs), want), case


@DTYPES
def test_a_parameter_inside_a_swapped_out_is_read_as_called(dtype):
    for case in cases(dtype):
        want = case(case.arrays)
        if want.dtype != case.arrays[0].dtype or case.name not in {e.name for e in ROW_REDUCTIONS}:
            continue
        if len(case.arrays) < 2:
            continue  # no parameter to put in out
        out = swapped(np.ascontiguousarray(np.broadcast_to(case.arrays[1], want.shape)))
        args = [case.arrays[0], out[0, 0], *case.arrays[2:]]  # the weight is out's first row
        case(args, out=out)
        assert same_bits(native_bits(out), want), case


def test_swapped_out_errors_name_out_and_write_nothing():
    case = cases("f4")[0]  # rms_norm
    x = case.arrays[0]
    fill = np.full(x.shape, 7, dtype=SWAPPED + "f4")

    read_only = fill.copy()
    read_only.flags.writeable = False
    with pytest.raises(
        ValueError, match=r"^rms_norm: out: expected a writable array, got a read-only ndarray$"
    ):
        case(case.arrays, out=read_only)

    wrong_dtype = np.full(x.shape, 7, dtype=SWAPPED + "f8")
    with pytest.raises(
        ValueError,
        match=r"rms_norm: out: expected shape \(3, 5, 16\) and dtype float32 .* got \(3, 5, 16\) and float64",
    ):
        case(case.arrays, out=wrong_dtype)
    assert (wrong_dtype == 7).all()

    wrong_shape = fill[:, :4].copy()
    with pytest.raises(ValueError, match=r"rms_norm: out: expected shape \(3, 5, 16\) .* got \(3, 4, 16\)"):
        case(case.arrays, out=wrong_shape)
    assert (wrong_shape == 7).all()

    # An error in another argument leaves a swapped out as it was too.
    out = fill.copy()
    with pytest.raises(ValueError, match=r"rms_norm: weight: expected shape \(16,\)"):
        case([x, swapped(case.arrays[1][:8])], out=out)
    assert (out == 7).all()

    # Rotary's out in the other byte order, of the wrong dtype.
    rot = next(c for c in cases("f2") if c.name == ROW_MAPS[0].name)
    out = np.zeros(rot.arrays[0].shape, dtype=SWAPPED + "f4")
    with pytest.raises(ValueError, match=rf"{rot.name}: out: expected shape \(3, 5, 16\) and dtype float16"):
        rot(rot.arrays, out=out)
    assert (out == 0).all()


def test_masked_swapped_arrays_are_still_refused():
    case = cases("f4")[0]
    m = np.ma.masked_array(swapped(case.arrays[0]), mask=False)
    with pytest.raises(TypeError, match="rms_norm: x: expected an array without a mask"):
        case([m, *case.arrays[1:]])
    with pytest.raises(TypeError, match="rms_norm: out: expected an array without a mask"):
        case(case.arrays, out=np.ma.masked_array(swapped(case.arrays[0]), mask=False))


def test_other_producers_in_the_other_byte_order_are_refused_as_documented():
    # numpy arrays are converted; a memoryview of one is not numpy's (docs/bridge.md).
    for case in (cases("f4")[0], next(c for c in cases("f4") if c.name == ROW_MAPS[0].name)):
        for i in range(len(case.arrays)):
            args = list(case.arrays)
            args[i] = memoryview(swapped(np.ascontiguousarray(args[i])))
            with pytest.raises(ValueError, match="expected native byte order"):
                case(args)


@pytest.mark.parametrize(("xd", "pd"), list(itertools.permutations(["f2", "f4", "f8"], 2)))
def test_mixed_dtypes_in_the_other_byte_order(xd, pd):
    # Parameters of another dtype (computed as torch does) and rotary's
    # promotion: the same bits swapped as native.
    for case in cases(xd):
        args = [case.arrays[0], *(a.astype(pd) for a in case.arrays[1:])]
        assert same_bits(case([swapped(a) for a in args]), case(args)), case
