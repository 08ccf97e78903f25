"""Property tests: every op of the bridge and of torch-cpu against numpy /
torch, on random shapes (rank 0-4, sizes 0-65), random layouts (steps,
offsets, transposes, broadcast stride 0, negative steps for numpy), dtypes
and values (inf, nan, -0.0, subnormals, huge and tiny magnitudes).

The reference computes the way the kernels are specified: float32/float64
in their own type, 16-bit types in float32 rounded once, by the op table's
formula for each entry; so every comparison is exact (NaNs compare equal to
NaNs), or within the entry's ulps for a transcendental op (silu_mul)."""

import numpy as np
import tierkit_bridge as tb
import tierkit_torch  # noqa: F401  (registers torch.ops.tierkit)
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tierkit_core.op_table import OPS, ROW_REDUCTIONS, find
from tierkit_core.op_testing import evaluate, numpy_functions, numpy_row_reference
from tierkit_torch_common import testing

# Every entry of the op table, by its bridge name, from its entry alone: a
# new one is tested here with no new test code.
BRIDGE = {op.bridge: op for op in OPS}
ARITY = {name: len(op.tensors) for name, op in BRIDGE.items()}
NUMPY = numpy_functions(np)
BUDGET = 6000  # elements per operand, so the ci profile stays fast


@st.composite
def shapes(draw):
    rank = draw(st.integers(0, 4))
    shape, room = [], BUDGET
    for _ in range(rank):
        size = draw(st.integers(0, min(65, max(1, room))))
        shape.append(size)
        room = room // max(size, 1)
    return tuple(shape)


def values(dtype):
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    return st.floats(width=width, allow_nan=True, allow_infinity=True, allow_subnormal=True)


@st.composite
def laid_out(draw, shape, dtype, writable=False, negative=True):
    """An array of `shape` whose memory layout is drawn too."""
    layout = draw(
        st.sampled_from(
            ["contiguous", "strided", "transposed", "broadcast"]
            if not writable
            else ["contiguous", "strided", "transposed"]
        )
    )
    if layout == "transposed" and len(shape) >= 2:
        perm = draw(st.permutations(range(len(shape))))
        base_shape = tuple(shape[p] for p in perm)
        base = draw(hnp.arrays(dtype, base_shape, elements=values(dtype)))
        return np.transpose(base, np.argsort(perm))
    if layout == "strided" and shape:
        steps = [draw(st.sampled_from([1, 2, 3] + ([-1, -2] if negative else []))) for _ in shape]
        offsets = [draw(st.integers(0, 1)) for _ in shape]
        base_shape = tuple(s * abs(k) + o for s, k, o in zip(shape, steps, offsets))
        base = draw(hnp.arrays(dtype, base_shape, elements=values(dtype)))
        index = tuple(
            slice(o, o + s * k, k) if k > 0 else slice(o + s * -k - 1 if s else None, None, k)
            for s, k, o in zip(shape, steps, offsets)
        )
        view = base[index]
        view = view[tuple(slice(0, s) for s in shape)]
        assert view.shape == shape, (view.shape, shape)
        return view
    if layout == "broadcast" and shape:
        small = tuple(1 if draw(st.booleans()) else s for s in shape)
        base = draw(hnp.arrays(dtype, small, elements=values(dtype)))
        return np.broadcast_to(base, shape)
    return draw(hnp.arrays(dtype, shape, elements=values(dtype)))


def reference(op, inputs, scalars):
    """16-bit in float32 rounded once, the others in their own type."""
    dtype = inputs[0].dtype
    work = np.float32 if dtype == np.float16 else dtype.type
    x = [np.asarray(i, dtype=work) for i in inputs]
    with np.errstate(all="ignore"):
        r = evaluate(BRIDGE[op].name, x, NUMPY, [work(v) for v in scalars])
        return np.asarray(r).astype(dtype)


def assert_equal_within_ulps(got, want, entry, dtype):
    """Exact (NaN equal to NaN) for + - * ops; within the entry's ulps otherwise."""
    if entry.ulps == 0:
        np.testing.assert_array_equal(got, want)
    else:
        info = np.finfo(dtype)
        np.testing.assert_allclose(got, want, rtol=entry.ulps * info.eps, atol=entry.ulps * info.tiny)


scalars = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def check_bridge(data, op, dtype):
    shape = data.draw(shapes())
    inputs = [data.draw(laid_out(shape, dtype)) for _ in range(ARITY[op])]
    args = [data.draw(scalars) for _ in BRIDGE[op].scalars]
    use_out = data.draw(st.booleans())
    out = data.draw(laid_out(shape, dtype, writable=True)) if use_out else None
    got = getattr(tb, op)(*inputs, *args, out=out)
    if use_out:
        assert got is out
    assert_equal_within_ulps(np.asarray(got), reference(op, inputs, args), BRIDGE[op], dtype)


def _bridge_test(op, dtype):
    @given(data=st.data())
    def test(data):
        check_bridge(data, op, dtype)

    test.__name__ = f"test_bridge_{op}_{dtype.__name__}"
    return test


for _op in ARITY:
    for _dtype in (np.float32, np.float64, np.float16):
        _t = _bridge_test(_op, _dtype)
        globals()[_t.__name__] = _t


# ---- torch-cpu ------------------------------------------------------------------

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def to_torch(a: np.ndarray, dtype) -> torch.Tensor:
    """The same values in the same layout (strides, offset, stride-0 dims),
    in `dtype`: the root memory is converted, then viewed with a's strides."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    item = a.itemsize
    offset = (a.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // item
    flat = torch.from_numpy(np.ascontiguousarray(root).reshape(-1).copy()).to(dtype)
    return flat.as_strided(a.shape, [s // item for s in a.strides], offset)


TORCH_ARITY = {**testing.ARITY, "add_out": 2}


def check_torch(data, op, dtype):
    shape = data.draw(shapes())
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    inputs = [
        to_torch(data.draw(laid_out(shape, np_dtype, negative=False)), dtype) for _ in range(TORCH_ARITY[op])
    ]
    if op == "add_out":
        out = to_torch(data.draw(laid_out(shape, np_dtype, writable=True, negative=False)), dtype)
        torch.ops.tierkit.add_out(inputs[0], inputs[1], out)
        got, want, tol = out, testing.expected("custom_add", *inputs), {"rtol": 0, "atol": 0}
    else:
        args = [data.draw(scalars) for _ in find(op).scalars]
        got = testing.call("tierkit", op, *inputs, scalars=args)
        want, tol = testing.expected(op, *inputs, scalars=args), testing.tolerance(op, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _torch_test(op, dtype):
    @given(data=st.data())
    def test(data):
        check_torch(data, op, dtype)

    test.__name__ = f"test_torch_{op}_{str(dtype).removeprefix('torch.')}"
    return test


for _op in TORCH_ARITY:
    for _dtype in TORCH_DTYPES:
        _t = _torch_test(_op, _dtype)
        globals()[_t.__name__] = _t


# ---- the row reductions (ROW_REDUCTIONS), bridge and torch-cpu --------------------------
#
# Random shapes (rank 1-4), layouts and finite values of modest size (the
# special values are the fuzzers' and each suite's edge tests), parameters
# present or not, against the entry's own formula in float64 (numpy) and
# aten's F.<name> (torch): a new entry is tested here with no new test code.

ROWS = {e.name: e for e in ROW_REDUCTIONS}
moderate = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def row_inputs(draw, entry, dtype, negative=True):
    shape = draw(shapes().filter(lambda s: len(s) >= 1))
    base = draw(hnp.arrays(dtype, shape, elements=moderate))
    x = np.flip(base, -1) if negative and draw(st.booleans()) else base  # a negative step in the last dim
    params = [
        draw(hnp.arrays(dtype, shape[-1:], elements=moderate)) if draw(st.booleans()) else None
        for _ in entry.params
    ]
    return x, params


def row_reference(entry, x, params, eps):
    return numpy_row_reference(np, entry, x, params, eps, np.float64)


def row_tolerance(entry, x, params, eps, dtype):
    """A few units of the dtype (16-bit: its own, rounded once from float) of
    each element's scale (the normalised row's largest magnitude times the
    weight, plus the bias), grown by the row's magnitude over its spread:
    a statistic kept in the compute type (layer_norm's mean) is off by half
    a unit of the row's magnitude, and x - mean carries that, relative to the
    spread, into every element."""
    unit = np.finfo(dtype).eps if dtype != np.float64 else 1e-13
    x = np.asarray(x, dtype=np.float64)
    xhat = row_reference(entry, x, [None] * len(params), eps)
    scale = np.abs(xhat).max(-1, keepdims=True) if xhat.size else 0.0
    w = 1.0 if not params or params[0] is None else np.abs(params[0].astype(np.float64))
    b = 0.0 if len(params) < 2 or params[1] is None else np.abs(params[1].astype(np.float64))
    if x.size:
        amax = np.abs(x).max(-1, keepdims=True)
        spread = np.abs(x - x.mean(-1, keepdims=True)).max(-1, keepdims=True)
        grow = 1 + np.divide(amax, spread, out=np.zeros_like(amax), where=spread > 0)
    else:
        grow = 1.0
    # 16-bit results below the normal range round to a multiple of the smallest subnormal.
    tiny = np.finfo(np.float16).smallest_subnormal if dtype == np.float16 else 0.0
    return 8 * unit * (scale * w * grow + b) + 2 * tiny + 1e-30


def check_bridge_rows(data, name, dtype):
    entry = ROWS[name]
    x, params = data.draw(row_inputs(entry, dtype))
    eps = 1e-5
    got = np.asarray(getattr(tb, name)(x, *params, -1 if entry.has_dim else eps)).astype(np.float64)
    want = row_reference(entry, x, params, eps)
    assert got.shape == want.shape
    assert (np.abs(got - want) <= row_tolerance(entry, x, params, eps, dtype)).all()


def check_torch_rows(data, name, dtype):
    entry = ROWS[name]
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    x, params = data.draw(row_inputs(entry, np_dtype, negative=False))
    tx = to_torch(x, dtype)
    tp = [None if p is None else torch.from_numpy(p.copy()).to(dtype) for p in params]
    got = getattr(torch.ops.tierkit, name)(tx, *tp, -1 if entry.has_dim else 1e-5)
    wide = tx.float() if dtype != torch.float64 else tx
    if entry.has_dim:  # torch.<name>(x, -1)
        want = getattr(torch, name)(wide, -1)
    else:
        want = getattr(torch.nn.functional, name)(
            wide,
            tx.shape[-1:],
            *(
                None if p is None else p.to(torch.float64 if dtype == torch.float64 else torch.float32)
                for p in tp
            ),
            1e-5,
        )
    assert got.shape == want.shape and got.dtype == dtype
    tol = row_tolerance(
        entry,
        tx.double().numpy(),
        [None if p is None else p.double().numpy() for p in tp],
        1e-5,
        {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}.get(
            dtype, np.float16
        ),
    )
    if dtype == torch.bfloat16:
        tol = tol * 8  # bfloat16's unit is 8 times float16's
    assert (np.abs(got.double().numpy() - want.double().numpy()) <= tol).all()


def _rows_test(check, prefix, name, dtype, label):
    @given(data=st.data())
    def test(data):
        check(data, name, dtype)

    test.__name__ = f"test_{prefix}_{name}_{label}"
    return test


for _name in ROWS:
    for _dtype in (np.float32, np.float64, np.float16):
        _t = _rows_test(check_bridge_rows, "bridge", _name, _dtype, _dtype.__name__)
        globals()[_t.__name__] = _t
    for _dtype in TORCH_DTYPES:
        _t = _rows_test(check_torch_rows, "torch", _name, _dtype, str(_dtype).removeprefix("torch."))
        globals()[_t.__name__] = _t
