"""docs/torch-cpu.md's per-op table is current: torch-cpu's own generator
(tools/op_docs.py) writes it from the op table."""

import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "op_docs.py"


@pytest.mark.skipif(not (TOOL.parents[3] / "docs" / "torch-cpu.md").exists(), reason="not in a checkout")
def test_docs_table_is_current():
    proc = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (TOOL.parents[3] / "docs" / "torch-cpu.md").read_text()
    from tierkit_core.op_table import OPS

    for op in OPS:
        assert f"| `{op.name}` (+ `.out`) |" in text, op.name
