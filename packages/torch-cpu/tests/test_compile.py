"""torch.compile (fullgraph, static and dynamic shapes) and torch.export."""

import pytest
import tierkit_torch
import torch
import torch._dynamo.testing
from reference import ALPHA, ARITY, BETA, C, call, composite, expected, tolerance

ops = torch.ops.tierkit


def pipeline(a, b):
    x = ops.custom_add(a, b)
    y = ops.scale_shift(x, ALPHA, BETA)
    z = ops.muladd(y, a, C)
    return ops.mul(z, b)


def eager_reference(a, b):
    return ((ALPHA * (a + b) + BETA) * a + C) * b


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_fullgraph_compile_matches_eager(gen):
    a, b = torch.randn(64, 33, generator=gen), torch.randn(64, 33, generator=gen)
    compiled = torch.compile(pipeline, fullgraph=True)
    torch.testing.assert_close(compiled(a, b), eager_reference(a, b))


def test_dynamic_shapes_do_not_recompile(gen):
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(pipeline, fullgraph=True, dynamic=True, backend=counter)
    for n in (8, 17, 130):
        a, b = torch.randn(n, 3, generator=gen), torch.randn(n, 3, generator=gen)
        torch.testing.assert_close(compiled(a, b), eager_reference(a, b))
    assert counter.frame_count == 1


@pytest.mark.parametrize("op", list(ARITY))
def test_every_entry_compiles_fullgraph_dynamic_with_backward(op, gen):
    # Every entry of the op table from its entry alone: one graph for every
    # size (no recompile after the first), values and gradients as eager's composite.
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda *x: call(op, *x), fullgraph=True, dynamic=True, backend=counter)
    frames = []
    for n in (8, 17, 130):
        xs = [torch.randn(n, 3, generator=gen).requires_grad_() for _ in range(ARITY[op])]
        ys = [x.detach().clone().requires_grad_() for x in xs]
        got = compiled(*xs)
        torch.testing.assert_close(got, expected(op, *xs), **tolerance(op, torch.float32))
        got.sum().backward()
        composite(op, *ys).sum().backward()
        for x, y in zip(xs, ys):
            torch.testing.assert_close(x.grad, y.grad)
        frames.append(counter.frame_count)
    assert frames[0] >= 1 and frames == [frames[0]] * 3, frames


def test_compiled_backward(gen):
    a = torch.randn(16, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, generator=gen, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(lambda a, b: tierkit_torch.muladd(a, b, 3.0).sum(), fullgraph=True)
    compiled(a, b).backward()
    torch.testing.assert_close(a.grad, b.detach())
    torch.testing.assert_close(b.grad, a.detach())


def test_compile_mutating_op(gen):
    def f(a, b):
        out = torch.empty_like(a)
        ops.add_out(a, b, out)
        return out * 2

    a, b = torch.randn(10, generator=gen), torch.randn(10, generator=gen)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(a, b), (a + b) * 2)


def test_export_captures_the_ops(gen):
    class M(torch.nn.Module):
        def forward(self, a, b):
            return pipeline(a, b)

    a, b = torch.randn(4, 5, generator=gen), torch.randn(4, 5, generator=gen)
    exported = torch.export.export(M(), (a, b))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {
        "tierkit.custom_add.default",
        "tierkit.scale_shift.default",
        "tierkit.muladd.default",
        "tierkit.mul.default",
    } <= targets, targets
    torch.testing.assert_close(exported.module()(a, b), eager_reference(a, b))


@pytest.mark.parametrize("late", [False, True], ids=["bound", "bound-on-first-call"])
def test_typed_faces_compile_once(late):
    # Each face read a placeholder that its first call swapped for the overload:
    # dynamo guarded on the placeholder's __code__, and every compiled model
    # recompiled on its second call.
    from tierkit_torch_common.testing import compiled_faces_frames

    assert compiled_faces_frames("tierkit", late) == [1, 1, 1]
