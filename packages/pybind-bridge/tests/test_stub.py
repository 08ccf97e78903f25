"""The op table's lines of the bridge's stub are current: the bridge's own
generator (tools/op_stub.py) writes them, and says which file is stale."""

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "op_stub.py"


def test_stub_is_current():
    proc = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_stale_stub_is_named(tmp_path, monkeypatch):
    sys.path.insert(0, str(TOOL.parent))
    try:
        import op_stub
    finally:
        sys.path.remove(str(TOOL.parent))
    stale = tmp_path / "_bridge.pyi"
    stale.write_text(op_stub.STUB.read_text().replace("def silu_mul(", "def silu_mul_old("))
    from tierkit_core.op_codegen import write_or_check

    assert write_or_check({stale: op_stub.render(stale.read_text())}, True, op_stub.COMMAND) == 1
    assert write_or_check({stale: op_stub.render(stale.read_text())}, False, op_stub.COMMAND) == 0
    assert stale.read_text() == op_stub.STUB.read_text()  # rewritten to the generated text
