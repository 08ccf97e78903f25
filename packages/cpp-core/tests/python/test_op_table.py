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
    # From the checkout's sources: the generator writes the checkout's header and stub.
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
