"""opcheck, torch.compile (fullgraph) and torch.export over every op."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401
import torch
from tierkit_core.op_table import OPS
from tierkit_torch_common import testing
from torch.library import opcheck

NS = "tierkit_stable"
ops = torch.ops.tierkit_stable


def t(*shape, **kw):
    return torch.randn(*shape, **kw)


def table_samples():
    """Every entry of the op table from its entry alone (a new one is checked
    with no new test code): both dtypes and grad, a broadcast, channels_last,
    a promotion, and its .out overload."""
    for name, n in testing.ARITY.items():
        s = testing.scalars(name)
        for grad in (False, True):
            for dtype in (torch.float32, torch.float64):
                yield (
                    name,
                    getattr(ops, name).default,
                    (*[t(3, 4, dtype=dtype, requires_grad=grad) for _ in range(n)], *s),
                    {},
                )
        yield (
            name,
            getattr(ops, name).default,
            (t(3, 1, requires_grad=True), *[t(4) for _ in range(n - 1)], *s),
            {},
        )
        cl = [t(2, 3, 4, 5).contiguous(memory_format=torch.channels_last) for _ in range(n)]
        yield (name, getattr(ops, name).default, (*cl, *s), {})
        yield (name, getattr(ops, name).default, (t(5).bfloat16(), *[t(5) for _ in range(n - 1)], *s), {})
        yield (name, getattr(ops, name).out, (*[t(4, 3) for _ in range(n)], *s), {"out": torch.empty(4, 3)})


SAMPLES = [
    *table_samples(),
    ("add_out", ops.add_out.default, (t(3), t(3), torch.empty(3)), {}),
    ("mul", ops.mul.default, (t(2, 3, 4).transpose(0, 2), t(2, 3, 4).transpose(0, 2)), {}),
    ("scale_shift", ops.scale_shift.default, (t(8).bfloat16(), 1.5, -0.25), {}),
]


@pytest.mark.parametrize(
    ("name", "op", "args", "kwargs"), SAMPLES, ids=[f"{s[0]}-{s[1]}-{i}" for i, s in enumerate(SAMPLES)]
)
def test_opcheck(name, op, args, kwargs):
    opcheck(op, args, kwargs)


@pytest.mark.parametrize("name", testing.NAMES)
def test_compile_fullgraph_dynamic_every_entry(name):
    f = torch.compile(lambda *x: testing.call(NS, name, *x), fullgraph=True, dynamic=True)
    for n in (5, 9):
        inputs = testing.random_inputs(name, n, 3)
        torch.testing.assert_close(
            f(*inputs), testing.expected(name, *inputs), **testing.tolerance(name, torch.float32)
        )


@pytest.mark.parametrize("name", [op.name for op in OPS if op.derivatives])
def test_compile_backward_every_entry(name):
    xs = testing.random_inputs(name, 6, requires_grad=True)
    ys = [x.detach().clone().requires_grad_() for x in xs]
    torch.compile(lambda *x: testing.call(NS, name, *x).sum(), fullgraph=True)(*xs).backward()
    testing.composite(name, *ys).sum().backward()
    for x, y in zip(xs, ys):
        torch.testing.assert_close(x.grad, y.grad)


def test_compile_fullgraph_dynamic():
    f = torch.compile(
        lambda a, b: ops.scale_shift(ops.muladd(a, b, 0.5), 2.0, 1.0), fullgraph=True, dynamic=True
    )
    for n in (5, 9):
        a, b = t(n), t(n)
        torch.testing.assert_close(f(a, b), (a * b + 0.5) * 2 + 1)


def test_compile_out_overload():
    f = torch.compile(lambda a, b, o: ops.custom_add.out(a, b, out=o), fullgraph=True)
    a, o = t(4, 5), torch.empty(4, 5)
    f(a, a, o)
    torch.testing.assert_close(o, a + a, rtol=0, atol=0)


def test_compile_backward():
    a = t(6, requires_grad=True)
    f = torch.compile(lambda x: ops.mul(x, x).sum(), fullgraph=True)
    f(a).backward()
    torch.testing.assert_close(a.grad, 2 * a.detach())


def test_export_round_trip():
    class M(torch.nn.Module):
        def forward(self, a, b):
            return ops.scale_shift(ops.mul(a, b), 2.0, 1.0)

    a = t(3, 4)
    ep = torch.export.export(M(), (a, a))
    assert any("tierkit_stable" in str(n.target) for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(a, a), (a * a) * 2 + 1)


@pytest.mark.parametrize("late", [False, True], ids=["bound", "bound-on-first-call"])
def test_typed_faces_compile_once(late):
    # Each face read a placeholder that its first call swapped for the overload:
    # dynamo guarded on the placeholder's __code__, and every compiled model
    # recompiled on its second call.
    from tierkit_torch_common.testing import compiled_faces_frames

    assert compiled_faces_frames("tierkit_stable", late) == [1, 1, 1]
