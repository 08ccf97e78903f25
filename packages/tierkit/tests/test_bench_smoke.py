"""`tierkit bench --quick` end to end: every section produces figures (or says
why it is skipped), the JSON has the documented shape, the report and plots
exist. No timing thresholds: benchmarks are not tests."""

import json
import subprocess
import sys

import pytest

SECTIONS = {
    "stream",
    "kernels",
    "boundary",
    "dispatch",
    "exports",
    "gil",
    "allocation",
    "gpu",
    "stable_abi",
    "percall",
}
NEEDS = ("numpy", "torch", "tierkit_bridge", "tierkit_torch", "tierkit_torch_stable")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    for module in NEEDS:
        pytest.importorskip(module)
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "tierkit", "bench", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_progress_is_reported(quick_run):
    _, proc = quick_run
    assert "(1/10) stream" in proc.stderr and "(10/10) stable_abi" in proc.stderr


def test_json_schema(quick_run):
    out, _ = quick_run
    results = json.loads((out / "results.json").read_text())
    assert results["quick"] is True
    for key in ("date", "cpu", "cores", "python", "torch", "numpy", "torch_threads"):
        assert key in results["machine"], key
    assert set(results["sections"]) == SECTIONS
    for name, section in results["sections"].items():
        assert set(section) >= {"rows", "skipped", "seconds"}, name
        if section["skipped"]:
            assert name == "gpu" and section["rows"] == []
            continue
        timed = [r for r in section["rows"] if "median_s" in r]
        assert timed, f"section {name} produced no figures"
        for r in timed:
            assert r["section"] == name
            assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"], r


def test_every_target_is_reported(quick_run):
    out, _ = quick_run
    results = json.loads((out / "results.json").read_text())
    assert len(results["targets"]) == 27
    for t in results["targets"]:
        assert set(t) == {"target", "threshold", "measured", "met", "detail"}
        assert t["met"] in (True, False, None)


def test_report_and_plots(quick_run):
    out, _ = quick_run
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "| target | threshold | measured | met |" in report
    for section in (
        "The limit",
        "Kernels",
        "The boundary",
        "Dispatch",
        "DLPack",
        "GIL",
        "Allocation",
        "GPU",
        "Stable ABI",
        "Per-call cost",
    ):
        assert section in report, section
    for png in ("kernels_gbs.png", "boundary.png", "dispatch.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png
