"""Torch tensors through DLPack's C exchange API (`__dlpack_c_exchange_api__`,
DLPack 1.2+): read and written without `__dlpack__`, with the same results
and the same refusals as the capsule path, which stays for every producer
without the table (or with one of another major version)."""

import ctypes

import pytest
import tierkit_bridge as tb

torch = pytest.importorskip("torch")
if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
    pytest.skip("this torch has no DLPack C exchange API", allow_module_level=True)


@pytest.fixture
def no_capsules(monkeypatch):
    """torch's Python-level DLPack methods, made to fail: a call that still
    works did not use them."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("the capsule path was taken")

    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    monkeypatch.setattr(torch.Tensor, "__dlpack_device__", refuse)


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "strided": lambda t: t[::2, 1::3],
    "expanded": lambda t: t[:1].expand(t.shape),
    "scalar": lambda t: t[0, 0],
    "empty": lambda t: t[:0],
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_inputs_and_out_go_through_the_table(no_capsules, layout, dtype):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 6, generator=g).to(dtype)
    a, b = LAYOUTS[layout](base), LAYOUTS[layout](base.flip(0))
    out = torch.empty_like(a.contiguous())
    version = out._version
    assert tb.add(a, b, out=out) is out
    work = torch.float64 if dtype == torch.float64 else torch.float32  # 16-bit: float32, rounded once
    assert torch.equal(out, (a.to(work) + b.to(work)).to(dtype))
    assert out._version == version + 1  # autograd sees the write


def test_out_is_written_in_place_through_a_strided_view(no_capsules):
    base = torch.zeros(4, 6)
    view = base[:, ::2]
    x = torch.arange(12.0).reshape(4, 3)
    tb.mul(x, x, out=view)
    assert torch.equal(base[:, ::2], x * x) and torch.equal(base[:, 1::2], torch.zeros(4, 3))


def test_the_allocating_form_returns_a_torch_tensor_made_through_the_table(no_capsules, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("the output went through a capsule")

    monkeypatch.setattr(tb.Buffer, "__dlpack__", refuse)  # what torch.from_dlpack(buffer) would call
    x = torch.arange(6.0).reshape(2, 3)
    y = tb.scale_shift(x, 2.0, 1.0)
    assert type(y) is torch.Tensor and y.is_contiguous() and torch.equal(y, 2 * x + 1)
    y.add_(1)  # an ordinary, writable tensor that owns the bridge's memory
    del x
    assert torch.equal(y, 2 * torch.arange(6.0).reshape(2, 3) + 2)


def test_torch_rules_still_apply(no_capsules, monkeypatch):
    # These take the capsule path's rules, so the capsule methods come back.
    monkeypatch.undo()
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match="a: expected a tensor that does not require grad"):
        tb.add(w, w)
    plain = torch.arange(3.0)
    neg = torch.complex(plain, plain).conj().imag  # a lazily negated view
    assert neg.is_neg()
    assert torch.equal(tb.add(neg, plain), neg + plain)  # read by value
    with pytest.raises(ValueError, match="out: expected a tensor without torch's neg bit"):
        tb.add(plain, plain, out=neg)
    with torch.inference_mode():
        frozen = torch.zeros(3)
    with pytest.raises(ValueError, match="out: Inplace update to inference tensor outside InferenceMode"):
        tb.add(plain, plain, out=frozen)


@pytest.mark.skipif(
    not hasattr(torch._C, "_const_dlpack_exchange_api"), reason="this torch has no read-only exchange table"
)
def test_a_read_only_export_is_read_but_never_written(no_capsules):
    class ReadOnly(torch.Tensor):  # torch's const table: exports with DLPack's READ_ONLY flag
        __dlpack_c_exchange_api__ = torch._C._const_dlpack_exchange_api()

    x = torch.arange(4.0).as_subclass(ReadOnly)
    plain = torch.arange(4.0)
    assert torch.equal(tb.add(x, plain, out=torch.empty(4)), 2 * plain)
    with pytest.raises(ValueError, match="out: expected a writable array, got a read-only ReadOnly"):
        tb.add(plain, plain, out=x)
    assert torch.equal(x.as_subclass(torch.Tensor), plain)  # untouched


class _Table(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", ctypes.c_void_p)] + [
        (name, ctypes.c_void_p) for name in ("alloc", "managed", "to_py", "dltensor", "stream")
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_FUTURE_TABLE = _Table(2, 0)  # a major version the bridge does not speak; null entries


def test_a_table_of_another_major_version_is_not_used():
    class Future(torch.Tensor):
        __dlpack_c_exchange_api__ = _capsule_new(
            ctypes.addressof(_FUTURE_TABLE), b"dlpack_exchange_api", None
        )

    x = torch.arange(4.0).as_subclass(Future)
    out = torch.empty(4)
    tb.add(x, x, out=out)  # calling a null entry would crash; the capsule path is taken
    assert torch.equal(out, 2 * torch.arange(4.0))


def test_a_producer_without_the_table_takes_the_capsule_path():
    class Holder:  # __dlpack__ alone, as an older library offers
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    x = torch.arange(4.0)
    assert torch.equal(torch.from_dlpack(tb.add(Holder(x), x)), 2 * x)


def test_more_tensor_types_than_the_cache_holds(no_capsules):
    x = torch.arange(3.0)
    for i in range(12):
        sub = type(f"Sub{i}", (torch.Tensor,), {})
        out = torch.empty(3)
        tb.add(x.as_subclass(sub), x, out=out)
        assert torch.equal(out, 2 * x), sub


def test_a_producer_that_is_not_torch_goes_through_the_table():
    # The table is DLPack's: tvm-ffi's and Paddle's tensors ship one but have
    # none of torch's attributes (requires_grad, is_neg...); their absence
    # means "nothing to resolve", not an AttributeError.
    class Foreign(torch.Tensor):
        def __getattribute__(self, name):
            if name in ("requires_grad", "is_neg", "is_conj", "is_inference"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    x = torch.arange(4.0).as_subclass(Foreign)
    out = torch.empty(4)
    tb.add(x, x, out=out)
    assert torch.equal(out, 2 * torch.arange(4.0))


def test_tensors_the_bridge_cannot_read_are_named_with_their_argument():
    meta = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match=r"^a: expected CPU memory, got a tensor on device meta"):
        tb.add(meta, meta)
    f8 = torch.zeros(3, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"^a: unsupported element type float8_e4m3fn from DLPack"):
        tb.add(f8, f8)


# Found by the fuzz session (inputs kept in packages/pybind-bridge/fuzz/corpus/regression-*).
def test_a_negated_view_torch_cannot_resolve_is_refused_naming_the_argument():
    f8 = torch._neg_view(torch.zeros(4, dtype=torch.float8_e4m3fn))
    with pytest.raises(
        TypeError, match=r"^obj: expected a tensor whose neg bit torch can resolve, got one of dtype"
    ):
        tb.as_buffer(f8)  # torch raised NotImplementedError ("neg_cpu" not implemented for 'Float8_e4m3fn')


def test_operands_torch_cannot_promote_are_refused_naming_the_argument():
    f8 = torch.zeros(4, dtype=torch.float8_e4m3fn)
    with pytest.raises(
        TypeError, match=r"^a: expected dtype float32, float64, float16 or bfloat16, got int32"
    ):
        tb.add(
            torch.zeros(4, dtype=torch.int32), f8
        )  # torch raised "Promotion for Float8 Types is not supported"
