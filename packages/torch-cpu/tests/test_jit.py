"""The JIT build (torch.utils.cpp_extension.load) registers the same ops and
computes the same results as the AOT wheel. It runs in a subprocess: both
libraries define the tierkit namespace and cannot share a process."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tierkit_torch
import torch

SCRIPT = textwrap.dedent(
    """
    import sys, torch, tierkit_torch
    from tierkit_torch import jit, _loader
    assert _loader.loaded() is None, "the AOT library must not load in JIT mode"
    ops = jit.load(build_directory=sys.argv[1])
    assert _loader.loaded() == "jit"
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g).t()
    results = {
        "custom_add": ops.custom_add(a, b),
        "mul": ops.mul(a, b),
        "scale_shift": ops.scale_shift(a, 1.5, -2.0),
        "muladd": tierkit_torch.muladd(a, b, 0.5),
    }
    out = torch.empty(1000)
    ops.add_out(a, b, out)
    results["add_out"] = out
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    results["grad_ok"] = torch.tensor(float(torch.autograd.gradcheck(lambda x: ops.scale_shift(x, 3.0, 1.0), (x,))))
    torch.save(results, sys.argv[2])
    """
)


@pytest.mark.skipif(shutil.which("ninja") is None, reason="torch's JIT load() needs ninja on PATH")
def test_jit_build_matches_aot(tmp_path):
    build_dir = Path(os.environ.get("TIERKIT_JIT_BUILD_DIR", tmp_path / "jit-build"))
    result_file = tmp_path / "jit.pt"
    env = {**os.environ, "TIERKIT_TORCH_JIT": "1", "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(build_dir), str(result_file)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jit = torch.load(result_file)

    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g).t()
    aot = {
        "custom_add": tierkit_torch.custom_add(a, b),
        "mul": tierkit_torch.mul(a, b),
        "scale_shift": tierkit_torch.scale_shift(a, 1.5, -2.0),
        "muladd": tierkit_torch.muladd(a, b, 0.5),
        "add_out": tierkit_torch.add_out(a, b, torch.empty(1000)),
    }
    for name, expected in aot.items():
        assert torch.equal(jit[name], expected), name
    assert jit["grad_ok"].item() == 1.0


def test_jit_load_refuses_when_aot_is_loaded():
    from tierkit_torch import _loader, jit

    assert _loader.loaded() == "aot"
    with pytest.raises(RuntimeError, match="already loaded in this process"):
        jit.load()


def test_jit_sources_are_the_aot_sources():
    from tierkit_torch import jit

    names = sorted(Path(p).name for p in jit.sources())
    aot = sorted(
        p.name for p in (Path(__file__).resolve().parents[1] / "csrc").glob("*.cpp")
    )  # setup.py's glob
    assert names == aot and "schemas.cpp" in names
