"""opcheck, torch.compile (fullgraph) and torch.export over every op."""

from __future__ import annotations

import pytest
import tierkit_torch_stable  # noqa: F401
import torch
from torch.library import opcheck

ops = torch.ops.tierkit_stable


def t(*shape, **kw):
    return torch.randn(*shape, **kw)


SAMPLES = [
    (ops.custom_add.default, (t(3, 4, requires_grad=True), t(3, 4)), {}),
    (ops.mul.default, (t(2, 3, 4).transpose(0, 2), t(2, 3, 4).transpose(0, 2)), {}),
    (ops.muladd.default, (t(5, requires_grad=True), t(5, requires_grad=True), 0.5), {}),
    (ops.scale_shift.default, (t(3, 4, dtype=torch.float64, requires_grad=True), 1.5, -0.25), {}),
    (ops.scale_shift.default, (t(8).bfloat16(), 1.5, -0.25), {}),
    (ops.add_out.default, (t(3), t(3), torch.empty(3)), {}),
    (ops.custom_add.out, (t(3), t(3)), {"out": torch.empty(3)}),
    (ops.mul.out, (t(2, 3), t(2, 3)), {"out": torch.empty(2, 3)}),
    (ops.muladd.out, (t(3), t(3), 2.0), {"out": torch.empty(3)}),
    (ops.scale_shift.out, (t(2, 3), 2.0, 1.0), {"out": torch.empty(2, 3)}),
]


@pytest.mark.parametrize(
    ("op", "args", "kwargs"), SAMPLES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SAMPLES)]
)
def test_opcheck(op, args, kwargs):
    opcheck(op, args, kwargs)


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
