"""torch.compile (fullgraph, static and dynamic shapes) and torch.export."""

import pytest
import tierkit_torch
import torch
from reference import ALPHA, BETA, C

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
