"""The ops against numpy/torch, for every dtype and layout, zero-copy checked."""

import numpy as np
import pytest
import tierkit_bridge as tb
from numpy_reference import ARITY, call, reference, tolerance, ulps

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

DTYPES = [np.float32, np.float64, np.float16]
ALPHA, BETA, C = 1.75, -0.5, 0.25  # the hand-written cases below; the table's cases use op_testing's


def layouts(rng, dtype):
    """(name, list of input arrays) for each layout under test."""

    def fresh(shape):
        return (rng.standard_normal(shape) * 10).astype(dtype)

    yield "contiguous", lambda: fresh((33, 17))
    yield "strided", lambda: fresh((40, 30))[::2, 1::3]
    yield "transposed", lambda: fresh((17, 33)).T
    yield "reversed", lambda: fresh(101)[::-1]
    yield "zero-dim", lambda: np.array(fresh(()), dtype=dtype)
    yield "empty", lambda: fresh((0, 4))
    yield "large", lambda: fresh(1_000_003)
    yield "broadcast", lambda: np.broadcast_to(fresh(7), (5, 7))


@pytest.mark.parametrize("op", list(ARITY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_numpy_on_every_layout(op, dtype, rng):
    for name, make in layouts(rng, dtype):
        inputs = [make() for _ in range(ARITY[op])]
        if name == "broadcast":  # mixing with a plain input keeps the shapes equal
            inputs = [inputs[0]] + [np.ascontiguousarray(i) for i in inputs[1:]]
        got = call(op, *inputs)
        # numpy's ufuncs give a numpy scalar for a 0-d result, an ndarray otherwise.
        assert isinstance(got, np.generic if name == "zero-dim" else np.ndarray), name
        assert got.dtype == dtype and got.shape == inputs[0].shape, name
        np.testing.assert_allclose(
            got, reference(op, dtype, *inputs), err_msg=f"{op} {name}", **tolerance(op, dtype)
        )


@pytest.mark.parametrize("op", list(ARITY))
def test_out_writes_in_place_and_returns_out(op, rng):
    inputs = [rng.standard_normal(1000) for _ in range(ARITY[op])]
    out = np.empty(1000)
    before = out.__array_interface__["data"][0]
    result = call(op, *inputs, out=out)
    assert result is out and out.__array_interface__["data"][0] == before
    np.testing.assert_allclose(out, reference(op, np.float64, *inputs), **tolerance(op, np.float64))


def test_out_may_be_an_input_exactly(rng):
    a = rng.standard_normal(4097).astype(np.float32)
    b = rng.standard_normal(4097).astype(np.float32)
    expected = a + b
    tb.add(a, b, out=a)
    np.testing.assert_array_equal(a, expected)
    x = rng.standard_normal((64, 64))[::2]
    expected = ALPHA * x + BETA
    tb.scale_shift(x, ALPHA, BETA, out=x)  # strided, in place
    np.testing.assert_array_equal(x, expected)


def test_strided_out(rng):
    a = rng.standard_normal((8, 8))
    out = np.zeros((8, 16))
    tb.scale_shift(a, 2.0, 1.0, out=out[:, ::2])
    np.testing.assert_array_equal(out[:, ::2], 2.0 * a + 1.0)
    assert not out[:, 1::2].any()


def test_inputs_are_not_copied_or_modified(rng):
    a = rng.standard_normal(10)
    b = rng.standard_normal(10)
    a0, b0 = a.copy(), b.copy()
    tb.muladd(a, b, 1.0)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_result_shares_memory_with_a_buffer_result():
    a = tb.Buffer.from_list([1.0, 2.0, 3.0], "float64")
    r = tb.add(a, a)
    assert isinstance(r, tb.Buffer)
    assert np.asarray(r).tolist() == [2.0, 4.0, 6.0]


def test_memoryview_and_buffer_inputs():
    a = memoryview(np.arange(5, dtype=np.float64))
    b = tb.Buffer.from_list([1, 1, 1, 1, 1], "float64")
    np.testing.assert_array_equal(np.asarray(tb.add(a, b)), np.arange(5.0) + 1)


def test_vector_add_list_matches_zero_copy_add(rng):
    a = rng.standard_normal(1001).astype(np.float32)
    b = rng.standard_normal(1001).astype(np.float32)
    slow = tb.vector_add_list(a.tolist(), b.tolist())
    assert isinstance(slow, list) and len(slow) == 1001
    np.testing.assert_array_equal(np.array(slow, dtype=np.float32), tb.add(a, b))
    assert tb.vector_add_list([], []) == []


def test_vector_add_list_errors():
    with pytest.raises(ValueError, match="b: expected length 2 \\(same as a\\), got 3"):
        tb.vector_add_list([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(TypeError):
        tb.vector_add_list([1.0, "x"], [1.0, 2.0])


def test_num_threads_setting_keeps_results(rng):
    a = rng.standard_normal(200_000)
    expected = a + a
    try:
        for n in (1, 2, 0):
            tb.set_num_threads(n)
            assert tb.get_num_threads() == n
            np.testing.assert_array_equal(tb.add(a, a), expected)
    finally:
        tb.set_num_threads(0)


def test_allocating_ops_can_use_the_caching_allocator(rng):
    a = rng.standard_normal(100_000).astype(np.float32)
    tb.allocator.set_enabled(True)
    try:
        first = tb.scale_shift(a, 2.0, 0.0)
        ptr = first.__array_interface__["data"][0]
        del first
        hits = tb.allocator.stats()["cache_hits"]
        second = tb.scale_shift(a, 2.0, 0.0)
        assert tb.allocator.stats()["cache_hits"] == hits + 1
        assert second.__array_interface__["data"][0] == ptr  # the same block, reused
        np.testing.assert_array_equal(second, 2.0 * a)
    finally:
        tb.allocator.set_enabled(False)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(ARITY))
def test_torch_tensors_in_torch_tensors_out(op, dtype):
    g = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    inputs = [torch.randn(300, 7, generator=g).to(dt).t() for _ in range(ARITY[op])]  # non-contiguous
    got = call(op, *inputs)
    assert isinstance(got, torch.Tensor) and got.dtype == dt and got.shape == (7, 300)
    # The kernel computes 16-bit types in float32 and rounds once; so does this.
    work = np.float64 if dtype == "float64" else np.float32
    want = reference(op, work, *(i.to(torch.float64).numpy() for i in inputs))
    info = torch.finfo(dt)
    torch.testing.assert_close(
        got, torch.from_numpy(want).to(dt), rtol=ulps(op) * info.eps, atol=ulps(op) * info.tiny
    )


@needs_torch
def test_torch_out_is_written_in_place():
    a = torch.arange(6.0)
    out = torch.empty(6)
    ptr = out.data_ptr()
    assert tb.scale_shift(a, 2.0, 1.0, out=out) is out
    assert out.data_ptr() == ptr
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]


def _lazily_negated(values):
    """A torch view with the negative bit that reads as `values`; its
    __dlpack__ exports the memory, which holds -values."""
    view = torch.complex(torch.zeros_like(values), -values).conj().imag
    assert view.is_neg() and torch.equal(view, values)
    return view


@needs_torch
def test_torch_negative_bit_inputs_are_read_by_value():
    v = _lazily_negated(torch.tensor([-10.0, -20.0, -30.0]))
    assert tb.add(v, v).tolist() == [-20.0, -40.0, -60.0]  # was [20, 40, 60]
    assert tb.muladd(v, torch.ones(3), 1.0).tolist() == [-9.0, -19.0, -29.0]
    assert v.tolist() == [-10.0, -20.0, -30.0]  # the view itself untouched


@needs_torch
def test_torch_negative_bit_out_is_refused_untouched():
    a = torch.arange(3.0)
    out = _lazily_negated(torch.tensor([7.0, 8.0, 9.0]))
    with pytest.raises(
        ValueError, match="out: expected a tensor without torch's neg bit, got one with it set"
    ):
        tb.add(a, a, out=out)
    assert out.tolist() == [7.0, 8.0, 9.0]
