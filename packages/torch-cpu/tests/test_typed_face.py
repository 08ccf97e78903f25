"""The typed face (tierkit_torch.ops) calls the overloads' C entry in eager
mode and the OpOverload under torch.compile: everything a call through
torch.ops.tierkit does must still happen through the face — __torch_function__
of subclasses and modes (seeing the overload as `func`), dispatch modes,
autograd, vmap, and dynamo tracing without a graph break."""

from typing import ClassVar

import pytest
import tierkit_torch
import torch
import torch._dynamo.testing
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

face = tierkit_torch.ops


class Recording(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


class Logged(torch.Tensor):
    seen: ClassVar[list] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs)


def test_a_torch_function_mode_sees_the_overload():
    a, out = torch.randn(4), torch.empty(4)
    with Recording() as mode:
        face.custom_add(a, a)
        face.scale_shift(a, 2.0, 1.0, out=out)
    assert mode.funcs == [torch.ops.tierkit.custom_add.default, torch.ops.tierkit.scale_shift.out]


def test_a_subclass_torch_function_sees_the_overload_and_keeps_its_type():
    Logged.seen.clear()
    a = torch.randn(4).as_subclass(Logged)
    result = face.silu_mul(a, torch.randn(4))
    assert torch.ops.tierkit.silu_mul.default in Logged.seen
    assert type(result) is Logged


def test_a_dispatch_mode_sees_the_op():
    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func)
            return func(*args, **(kwargs or {}))

    a = torch.randn(3)
    with Ops() as mode:
        face.mul(a, a)
    assert torch.ops.tierkit.mul.default in mode.seen


def test_autograd_and_vmap_through_the_face():
    a = torch.randn(5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64)
    face.muladd(a, b, 3.0).sum().backward()
    torch.testing.assert_close(a.grad, b)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(torch.func.vmap(face.custom_add)(x, y), x + y)


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_face_compiles_without_a_graph_break(dynamic):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()

    def f(a, b):
        return face.silu_mul(face.scale_shift(face.custom_add(a, b), 2.0, -1.0), b)

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic, backend=counter)
    a, b = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(compiled(a, b), f(a, b))
    assert counter.frame_count == 1
    torch._dynamo.reset()


def test_errors_are_the_overloads():
    with pytest.raises(RuntimeError) as via_face:
        face.custom_add(torch.randn(2), torch.randn(3))
    with pytest.raises(RuntimeError) as via_op:
        torch.ops.tierkit.custom_add(torch.randn(2), torch.randn(3))
    assert str(via_face.value) == str(via_op.value)


def test_rmsnorm_module_with_float32_weights_takes_bfloat16_input_like_torch():
    # The mixed-precision block: a float32 module, bfloat16 activations (autocast).
    torch.manual_seed(0)
    ours, theirs = tierkit_torch.RMSNorm(64, eps=1e-6), torch.nn.RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(64))
        theirs.weight.copy_(ours.weight)
    x = torch.randn(4, 64).bfloat16()
    got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
