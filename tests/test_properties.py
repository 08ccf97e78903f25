"""Property tests: every op of the bridge and of torch-cpu against numpy /
torch, on random shapes (rank 0-4, sizes 0-65), random layouts (steps,
offsets, transposes, broadcast stride 0, negative steps for numpy), dtypes
and values (inf, nan, -0.0, subnormals, huge and tiny magnitudes).

The reference computes the way the kernels are specified: float32/float64
in their own type, 16-bit types in float32 rounded once; so every
comparison is exact (NaNs compare equal to NaNs)."""

import numpy as np
import tierkit_bridge as tb
import tierkit_torch  # noqa: F401  (registers torch.ops.tierkit)
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

ARITY = {"add": 2, "mul": 2, "scale_shift": 1, "muladd": 2}
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


def reference(op, inputs, alpha, beta, c):
    dtype = inputs[0].dtype
    work = np.float32 if dtype == np.float16 else dtype.type
    x = [np.asarray(i, dtype=work) for i in inputs]
    with np.errstate(all="ignore"):
        r = {
            "add": lambda: x[0] + x[1],
            "mul": lambda: x[0] * x[1],
            "scale_shift": lambda: work(alpha) * x[0] + work(beta),
            "muladd": lambda: x[0] * x[1] + work(c),
        }[op]()
        return np.asarray(r).astype(dtype)


scalars = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def check_bridge(data, op, dtype):
    shape = data.draw(shapes())
    inputs = [data.draw(laid_out(shape, dtype)) for _ in range(ARITY[op])]
    alpha, beta, c = data.draw(scalars), data.draw(scalars), data.draw(scalars)
    use_out = data.draw(st.booleans())
    out = data.draw(laid_out(shape, dtype, writable=True)) if use_out else None
    args = {"add": (), "mul": (), "scale_shift": (alpha, beta), "muladd": (c,)}[op]
    got = getattr(tb, op)(*inputs, *args, out=out)
    if use_out:
        assert got is out
    np.testing.assert_array_equal(np.asarray(got), reference(op, inputs, alpha, beta, c))


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


def torch_reference(op, inputs, alpha, beta, c):
    dtype = inputs[0].dtype
    x = [i if dtype == torch.float64 else i.float() for i in inputs]
    r = {
        "custom_add": lambda: x[0] + x[1],
        "mul": lambda: x[0] * x[1],
        "scale_shift": lambda: alpha * x[0] + beta,
        "muladd": lambda: x[0] * x[1] + c,
    }[op]()
    return r.to(dtype)


TORCH_ARITY = {"custom_add": 2, "mul": 2, "scale_shift": 1, "muladd": 2, "add_out": 2}


def check_torch(data, op, dtype):
    shape = data.draw(shapes())
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    inputs = [
        to_torch(data.draw(laid_out(shape, np_dtype, negative=False)), dtype) for _ in range(TORCH_ARITY[op])
    ]
    alpha, beta, c = data.draw(scalars), data.draw(scalars), data.draw(scalars)
    ops = torch.ops.tierkit
    if op == "add_out":
        out = to_torch(data.draw(laid_out(shape, np_dtype, writable=True, negative=False)), dtype)
        ops.add_out(inputs[0], inputs[1], out)
        got, want = out, torch_reference("custom_add", inputs, alpha, beta, c)
    else:
        args = {"custom_add": (), "mul": (), "scale_shift": (alpha, beta), "muladd": (c,)}[op]
        got = getattr(ops, op)(*inputs, *args)
        want = torch_reference(op, inputs, alpha, beta, c)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


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
