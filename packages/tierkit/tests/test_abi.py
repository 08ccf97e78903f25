"""`tierkit doctor abi` on the torch tiers' real libraries: the stable tier
is called stable, torch-cpu (and torch-cuda) tied to their torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tierkit.doctor import abi


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tierkit", "doctor", "abi", *args], capture_output=True, text=True, check=False
    )


def test_stable_tier_is_stable_from_its_target_version():
    stable = pytest.importorskip("tierkit_torch_stable")
    (report,) = abi.reports_for("tierkit-torch-stable")
    assert report.unstable == []
    assert any(name.startswith("aoti_torch_") for name in report.stable)
    assert report.verdict == f"stable ABI: loads on torch >= {stable.MIN_TORCH}"
    out = run("tierkit_torch_stable")
    assert out.returncode == 0
    assert f"stable ABI: loads on torch >= {stable.MIN_TORCH}" in out.stdout


def test_torch_cpu_is_tied_to_its_torch():
    pytest.importorskip("tierkit_torch")
    from tierkit_torch import _build_info

    (report,) = abi.reports_for("tierkit-torch")
    assert report.stable == []
    assert len(report.unstable) > 10
    assert all(
        ("c10::" in s) or ("at::" in s) or ("torch::" in s) or ("caffe2" in s) for s in report.unstable
    )
    release = _build_info.TORCH_VERSION.split("+")[0]
    assert report.verdict.startswith(
        f"tied to torch {release}: {len(report.unstable)} unstable symbols, e.g. "
    )
    data = json.loads(run("tierkit-torch", "--json").stdout)
    assert data[0]["verdict"] == report.verdict


def test_torch_cuda_is_tied_to_its_torch():
    pytest.importorskip("tierkit_cuda")
    (report,) = abi.reports_for("tierkit-cuda")
    assert report.unstable and report.verdict.startswith("tied to torch ")


def test_wheel_is_read_from_the_archive(tmp_path):
    stable = pytest.importorskip("tierkit_torch_stable")
    lib = Path(stable.library_path())
    wheel = tmp_path / "tierkit_torch_stable-0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(lib, f"tierkit_torch_stable/{lib.name}")
        archive.write(lib.parent / "_build_info.py", "tierkit_torch_stable/_build_info.py")
    (report,) = abi.reports_for(str(wheel))
    assert report.path == f"{wheel.name}:tierkit_torch_stable/{lib.name}"
    assert report.verdict == f"stable ABI: loads on torch >= {stable.MIN_TORCH}"


def test_unknown_target_is_a_clear_error():
    out = run("no-such-tier-anywhere")
    assert out.returncode == 2
    assert "no-such-tier-anywhere: not a file, and no installed distribution" in out.stderr


def test_explain_points_undefined_symbols_at_doctor_abi():
    from tierkit.doctor import explain

    log = "ImportError: /x/libfoo.so: undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jS2_\n"
    diagnosis = explain.explain(log)
    assert diagnosis is not None and "tierkit doctor abi" in diagnosis.fix


DOCS = Path(__file__).resolve().parents[3] / "docs"


def _quoted_counts(distribution: str) -> tuple[int, int, int]:
    """docs/doctor.md's example output for `tierkit doctor abi <distribution>`:
    (stable, other torch C++, other symbols)."""
    text = (DOCS / "doctor.md").read_text()
    block = text.split(f"$ tierkit doctor abi {distribution}\n", 1)[1]
    found = re.search(r"stable C ABI: (\d+), other torch/c10 C\+\+: (\d+)\); other symbols: (\d+)", block)
    assert found, f"no counts under `tierkit doctor abi {distribution}` in docs/doctor.md"
    return tuple(int(n) for n in found.groups())


@pytest.mark.parametrize(
    ("distribution", "module"),
    [("tierkit-torch-stable", "tierkit_torch_stable"), ("tierkit-torch", "tierkit_torch")],
)
def test_counts_quoted_in_docs_are_the_tools_output(distribution, module):
    pytest.importorskip(module)
    (report,) = abi.reports_for(distribution)
    assert _quoted_counts(distribution) == (len(report.stable), len(report.unstable), report.other)
    stable_md = (DOCS / "torch-stable.md").read_text()
    if module == "tierkit_torch":
        assert f"torch-cpu's imports {len(report.unstable)} C++ symbols" in stable_md
    else:
        assert f"imports only the C shim ({len(report.stable)} `aoti_torch_*`" in stable_md


def test_docs_quote_counts_this_test_can_find():
    # The parser above must keep finding the numbers even where no tier is installed.
    assert _quoted_counts("tierkit-torch")[0] == 0 and _quoted_counts("tierkit-torch-stable")[1] == 0
