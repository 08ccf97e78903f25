"""The op table (tierkit_core.op_table): its committed C++ view is current,
and every entry is complete and consistent."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tierkit_core.op_table import FORMULA_FUNCTIONS, OPS, OUT_WRITERS, find

SRC = Path(__file__).resolve().parents[2] / "src"


def test_generated_files_are_current():
    # From the checkout's sources: the generator writes the checkout's header (and nothing outside core).
    proc = subprocess.run(
        [sys.executable, "-m", "tierkit_core.op_codegen", "--check"],
        cwd=SRC,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_entry_is_complete(op):
    assert op.kind == "pointwise"
    assert op.tensors, "an op takes at least one tensor"
    assert op.args.index("Tensor") == 0 and all(
        a.split()[0] == "Tensor" for a in op.args.split(",")[: len(op.tensors)]
    ), "tensors come first, then floats"
    assert set(op.derivatives) <= set(op.tensors)
    assert set(op.linear_in) <= set(op.tensors)
    assert op.doc and op.reference and op.autocast == "promote"
    words = set(FORMULA_FUNCTIONS) | {"grad", *op.tensors, *op.scalars}
    for formula in (*op.derivatives.values(), op.reference):
        used = set(re.findall(r"[A-Za-z_]\w*", formula))
        assert used <= words, f"{op.name}: {formula!r} uses {used - words}"
    if op.partial_when:
        eval(op.partial_when, {}, dict.fromkeys(op.scalars, 0.0))  # a condition on the scalars alone


def test_names_are_unique_and_writers_name_real_ops():
    names = [op.name for op in OPS] + [w.name for w in OUT_WRITERS]
    assert len(names) == len(set(names))
    for w in OUT_WRITERS:
        assert find(w.of).name == w.of
    with pytest.raises(KeyError, match="no operator named 'nope'"):
        find("nope")


def test_derived_facts():
    silu_mul = find("silu_mul")
    assert silu_mul.schema == "silu_mul(Tensor a, Tensor b) -> Tensor"
    assert silu_mul.out_schema == "silu_mul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)"
    assert silu_mul.node_name == "SiluMulBackward0" and silu_mul.saved == ("a", "b")
    assert find("custom_add").saved == () and find("custom_add").bridge == "add"
    assert find("scale_shift").scalars == ("alpha", "beta") and find("scale_shift").saved == ()


def test_core_python_imports_no_torch():
    # Core knows no torch in either language: its Python package neither
    # imports torch nor the torch tiers' helpers (those are tierkit_torch_common).
    import ast

    for path in (SRC / "tierkit_core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n.split(".")[0] in ("torch", "tierkit_torch_common") for n in names), (path, names)


def test_op_testing_evaluates_an_entry_over_any_arrays():
    # The suites' shared reference: the entry's formula with the test scalars
    # (or given ones), over whatever the caller passes -- here plain floats.
    import math

    from tierkit_core.op_testing import TEST_SCALARS, evaluate, scalar_values

    scalar = {"sigmoid": lambda a: 1 / (1 + math.exp(-a)), "silu": lambda a: a / (1 + math.exp(-a))}
    assert scalar_values("scale_shift") == [TEST_SCALARS["alpha"], TEST_SCALARS["beta"]] == [1.75, -0.5]
    assert evaluate("scale_shift", [2.0], scalar) == 1.75 * 2.0 - 0.5
    assert evaluate("muladd", [2.0, 3.0], scalar, [1.0]) == 7.0
    assert evaluate("silu_mul", [0.0, 5.0], scalar) == 0.0
    assert evaluate("silu_mul", [1.0, 2.0], scalar) == 2.0 / (1 + math.exp(-1.0))


def test_op_testing_refuses_a_wrong_call_by_name():
    import pytest
    from tierkit_core.op_testing import evaluate

    scalar = {"sigmoid": abs, "silu": abs}
    with pytest.raises(TypeError, match="evaluate: scale_shift takes 1 tensors, got 2"):
        evaluate("scale_shift", [1.0, 2.0], scalar)
    with pytest.raises(TypeError, match="evaluate: muladd takes 1 scalars, got 2"):
        evaluate("muladd", [1.0, 2.0], scalar, [1.0, 2.0])
    with pytest.raises(KeyError, match=r"functions lacks \['silu'\]"):
        evaluate("mul", [1.0, 2.0], {"sigmoid": abs})
    with pytest.raises(KeyError, match="no operator named 'nope'"):
        evaluate("nope", [], scalar)


def test_docs_with_quotes_become_valid_cpp_strings():
    # gelu_tanh_mul's doc holds approximate="tanh": unescaped, it ended the
    # C++ literal early (a build error in every tier).
    from tierkit_core.op_codegen import _c_text, render

    assert _c_text('a "b" \\ c\n') == 'a \\"b\\" \\\\ c\\n'
    for line in render().splitlines():
        if "bridge_doc = " in line:
            body = line.split("bridge_doc = ", 1)[1].rstrip(";")
            assert body.startswith('"') and body.endswith('"')
            assert not re.search(r'(?<!\\)"', body[1:-1]), line


def test_row_ops_declare_their_arguments_by_role():
    from tierkit_core.op_table import ROW_IN_PLACE, ROW_MAPS, ROW_OPS, ROW_REDUCTIONS, RowArg
    from tierkit_core.op_testing import ROW_FUNCTIONS

    # One entry type; each code path's tuple is the table filtered by what backward saves.
    assert sorted(e.name for e in (*ROW_REDUCTIONS, *ROW_MAPS, *ROW_IN_PLACE)) == sorted(
        e.name for e in ROW_OPS
    )
    assert all(e.saves == "stats" for e in ROW_REDUCTIONS) and all(e.saves == "linear" for e in ROW_MAPS)
    for e in (*ROW_REDUCTIONS, *ROW_MAPS):
        assert all(a.role in RowArg.ROLES[1:] for a in e.args)
        # The schema is x and then the arguments as declared, each in its role's spelling.
        assert e.schema == f"{e.name}(Tensor x, {', '.join(a.schema for a in e.args)}) -> Tensor"
    for e in ROW_IN_PLACE:  # its x arguments among its args, written in place, nothing returned
        assert e.saves == "none" and e.overloads == (e.name,)
        assert e.schema == f"{e.name}({', '.join(a.schema for a in e.args)}) -> ()"
        assert any(a.role == "x" and a.written for a in e.args)
    for e in ROW_OPS:
        words = set(FORMULA_FUNCTIONS) | {"grad", "x", *(a.name for a in e.args), *e.terms, *e.stats}
        words |= {*ROW_FUNCTIONS, "rotate", "rotate_t", "sum_to", "mapped"}
        if any(a.gathered_by for a in e.args):  # a gathered row's halves, widened (the entry's comment)
            words |= {"cos", "sin"}
        for formula in (e.reference, *e.derivatives.values(), *e.terms.values()):
            used = set(re.findall(r"[A-Za-z_]\w*", formula))
            assert used <= words, f"{e.name}: {formula!r} uses {used - words}"
        assert set(e.derivatives) <= {"x", *e.params, *e.tables}
    rms, rotary = ROW_REDUCTIONS[0], ROW_MAPS[0]
    assert (rms.params, rms.eps, rms.eps_arg) == (("weight",), None, "float? eps=None")
    assert (rotary.tables, rotary.flags) == (("cos", "sin"), (("interleaved", False),))
    assert rotary.overloads == ("rotary_embedding", "_rotary_embedding_backward")
    cached = ROW_IN_PLACE[0]
    assert cached.schema == (
        "rotary_embedding_cached(Tensor positions, Tensor(a!) query, Tensor(b!)? key, Tensor cos_sin_cache, "
        "int head_size, bool is_neox) -> ()"
    )
    # A dim role: the op's last argument; its building blocks run along the last dim, with no eps.
    along = [e for e in ROW_REDUCTIONS if e.has_dim]
    assert along
    for e in along:
        assert (e.params, e.has_eps) == ((), False)
        assert e.schemas == (
            f"{e.name}(Tensor x, int dim=-1) -> Tensor",
            f"_{e.name}_forward(Tensor x) -> (Tensor, Tensor)",
            f"_{e.name}_backward(Tensor grad, Tensor x, Tensor stats) -> (Tensor)",
        )


def test_a_row_op_refuses_roles_it_does_not_know():
    from tierkit_core.op_table import RowArg, RowOp, param

    with pytest.raises(ValueError, match="argument 'k': expected a role of"):
        RowOp(name="o", functor="O", doc="", args=(RowArg("k", "bogus"),), reference="x", derivatives={})
    with pytest.raises(ValueError, match="saves: expected .stats., .linear. or .none., got .y."):
        RowOp(
            name="o", functor="O", doc="", args=(param("weight"),), reference="x", derivatives={}, saves="y"
        )
    with pytest.raises(ValueError, match="stats: declared exactly when saves == 'stats'"):
        RowOp(name="o", functor="O", doc="", args=(param("weight"),), reference="x", derivatives={})


def test_a_row_reduction_takes_one_trailing_scalar_eps_or_dim():
    from tierkit_core.op_table import ROW_REDUCTIONS, RowOp, dim_arg, eps_arg

    common = dict(functor="O", doc="", reference="x", derivatives={}, stats=("s",))
    with pytest.raises(
        ValueError, match="o: a row reduction takes one trailing scalar, an eps or a dim, got both"
    ):
        RowOp(name="o", args=(eps_arg(), dim_arg()), **common)
    with pytest.raises(
        ValueError, match="o: a row reduction takes one trailing scalar, an eps or a dim, got neither"
    ):
        RowOp(name="o", args=(), **common)
    for e in ROW_REDUCTIONS:
        assert e.trailing(1e-6) == (-1 if e.has_dim else 1e-6)


def test_the_codegen_refuses_a_layout_the_adapters_do_not_take():
    # The tiers' map and in-place adapters read the entry's names by role,
    # for one layout of roles each: another is refused, naming the entry.
    import dataclasses

    from tierkit_core.op_codegen import _in_place_info, _map_info
    from tierkit_core.op_table import ROW_IN_PLACE, ROW_MAPS, flag

    rotary, cached = ROW_MAPS[0], ROW_IN_PLACE[0]
    two_flags = dataclasses.replace(rotary, args=(*rotary.args, flag("other", False)))
    with pytest.raises(ValueError, match="rotary_embedding: a row map takes one flag"):
        _map_info(two_flags)
    no_key = dataclasses.replace(cached, args=tuple(a for a in cached.args if a.name != "key"))
    with pytest.raises(ValueError, match=r"rotary_embedding_cached: an in-place row op takes \(index"):
        _in_place_info(no_key)
    info = _in_place_info(cached)
    for line in (
        'index = "positions"',
        'written = {"query", "key"}',
        'table = "cos_sin_cache"',
        'size = "head_size"',
        'flag = "is_neox"',
    ):
        assert line in info
