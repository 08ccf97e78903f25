"""tierkit_torch_common.fake without any tier: the typed faces over a stand-in
namespace, the float arguments' rule and aten's out= rules."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from tierkit_core.op_table import OPS, OUT_WRITERS
from tierkit_torch_common.fake import apply_out_rules, scalar_argument, typed_faces


def recording_namespace():
    """torch.ops.<ns> stand-in: each overload records how it was called."""
    calls = []

    def overload(name, kind):
        def fn(*args, **kwargs):
            calls.append((name, kind, args, kwargs))
            return (name, kind)

        return fn

    ns = SimpleNamespace()
    for op in OPS:
        setattr(
            ns, op.name, SimpleNamespace(default=overload(op.name, "default"), out=overload(op.name, "out"))
        )
    for w in OUT_WRITERS:
        setattr(ns, w.name, SimpleNamespace(default=overload(w.name, "default")))
    return ns, calls


def test_a_face_per_entry_with_the_schemas_parameters():
    ns, _ = recording_namespace()
    faces = typed_faces(torch, ns, "pkg")
    assert set(faces) == {op.name for op in OPS} | {w.name for w in OUT_WRITERS}
    for op in OPS:
        params = list(inspect.signature(faces[op.name]).parameters.values())
        assert [p.name for p in params] == [*op.tensors, *op.scalars, "out"]
        assert params[-1].kind is inspect.Parameter.KEYWORD_ONLY and params[-1].default is None
        assert op.doc in faces[op.name].__doc__ and faces[op.name].__module__ == "pkg.ops"


def test_faces_route_to_the_functional_or_the_out_overload():
    ns, calls = recording_namespace()
    faces = typed_faces(torch, ns, "pkg")
    a = torch.ones(2)
    assert faces["muladd"](a, a, 2) == ("muladd", "default")
    assert calls[-1][2] == (a, a, 2.0) and type(calls[-1][2][2]) is float  # an int read as a float
    out = torch.empty(2)
    assert faces["silu_mul"](a, b=a, out=out) == ("silu_mul", "out")
    assert calls[-1][3] == {"out": out}
    assert faces["add_out"](a, a, out) == ("add_out", "default")
    with pytest.raises(TypeError):
        faces["mul"](a)  # a missing argument is Python's own error


def test_a_float_argument_that_requires_grad_is_refused():
    t = torch.tensor(2.0, requires_grad=True)
    with pytest.raises(TypeError, match=r"op: c: expected a number, got a tensor that requires grad"):
        scalar_argument(torch, "op", "c", t)
    assert scalar_argument(torch, "op", "c", torch.tensor(2.5)) == 2.5
    with torch.no_grad():
        assert scalar_argument(torch, "op", "c", t) == 2.0


def test_out_rules():
    result = torch.ones(2, 3)
    empty = torch.empty(0)
    apply_out_rules(torch, "op", empty, result)
    assert empty.shape == (2, 3)
    with pytest.raises(RuntimeError, match=r"op: out: expected shape \[2, 3\] \(the result's\), got \[4\]"):
        apply_out_rules(torch, "op", torch.empty(4), result)
    with pytest.raises(RuntimeError, match=r"op: out: expected shape \[2, 3\] \(the result's\), got \[0\]"):
        apply_out_rules(torch, "op", torch.empty(0), result, resize=False)
    with pytest.raises(
        RuntimeError, match=r"op: out: expected a dtype the result \(float32\) can be cast to, got int32"
    ):
        apply_out_rules(torch, "op", torch.empty(2, 3, dtype=torch.int32), result)
