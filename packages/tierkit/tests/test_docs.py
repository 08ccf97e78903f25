"""Every shell and Python block in README.md, docs/ and the tiers' READMEs is
either run here, as written, or listed in SKIP with the reason: a page can no
longer drift from the code without a test noticing.

Blocks run from the repository root in an overlay environment: a scratch venv
that sees everything the running environment (.nox/_env) has installed but
installs into itself, so `pip install packages/...` as the pages write it
changes nothing outside the test. `pip`, `python`, `pytest` and `tierkit`
resolve to it.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
PAGES += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").glob("*/README.md"))
FENCE = re.compile(r"^```(bash|sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)

# (page, first line of the block) -> why it is not run here.
SKIP = {
    ("README.md", "bash ci/nox.sh -s bench"): "the main job: builds everything and benchmarks for minutes; "
    "its --quick form runs in test_bench_smoke.py, the test command is what CI runs",
    ("README.md", "bash ci/nox.sh -s tests-core -- -R"): "three sessions CI runs in full (tests); "
    "test_workspace.py records that each passes its arguments to ctest or pytest",
    ("docs/architecture.md", 'Tier("mytier"'): "a fragment of ci/nox_support/tiers.py, not a program",
    ("docs/deploy.md", "cd packages/torch-cpu/examples/aoti-runner"): "needs raw tensor files (inputs.bin); "
    "torch-cpu's test_deploy.py builds this runner and runs it on files it writes",
    ("docs/benchmarks.md", "bash ci/nox.sh -s bench"): "a full benchmark run (minutes); "
    "`tierkit bench --quick` runs in test_bench_smoke.py",
    (
        "docs/reliability.md",
        "bash ci/nox.sh -s tests-cross",
    ): "the soak profile: 2000 examples per op, minutes",
    ("docs/torch-cuda.md", "bash ci/nox.sh -s tests-cuda"): "rebuilds the CUDA tier (nvcc, ~1 min); "
    "CI's `tests` session runs exactly this",
    ("packages/cpp-core/README.md", "bash ci/nox.sh -s tests-core"): "sessions CI runs (tests, sanitize)",
    ("packages/cpp-core/README.md", "cmake -S packages/cpp-core"): "the CTest build tests-core does, "
    "in build/core-tests",
    (
        "packages/pybind-bridge/README.md",
        "bash ci/nox.sh -s tests-bridge",
    ): "sessions CI runs (tests, sanitize)",
    ("packages/pybind-bridge/README.md", "pip wheel --no-deps -w dist"): "the build session does the same "
    "from the sdist (isolated, PIP_NO_INDEX=1, find-links dist/ and build/wheelhouse)",
    ("packages/torch-stable/README.md", "pip install setuptools wheel"): "tests-stable builds this wheel "
    "(from its sdist) and runs the same suite under torch 2.14.1 and 2.13.0",
    ("packages/tierkit/README.md", "tierkit doctor"): "a usage summary with placeholders (LOG, `...`); "
    "each form runs in test_checks.py and test_explain.py",
    ("packages/tierkit/README.md", "bash ci/nox.sh -s tests-tools"): "runs this very suite",
    ("packages/torch-cpu/README.md", "bash ci/nox.sh -s tests-torch"): "sessions CI runs (tests, sanitize)",
    ("packages/torch-cpu/README.md", "pip install torch==2.14.1"): "rebuilds torch-cpu AOT and JIT (~3 min) "
    "and runs its whole suite: what tests-torch does; the same commands for the bridge run here",
    ("packages/torch-cuda/README.md", "import torch, tierkit_cuda"): "needs a CUDA device (x_cuda)",
    ("packages/torch-stable/README.md", "bash ci/nox.sh -s tests-stable"): "a session CI runs (tests): "
    "builds the wheel and a second venv with torch 2.13.0",
    ("packages/torch-cuda/README.md", "bash ci/nox.sh -s tests-cuda"): "a session CI runs (tests)",
    ("packages/torch-cuda/README.md", "export CUDA_HOME"): "rebuilds torch-cpu and torch-cuda (~3 min) in "
    "an environment with the 5.5 GB CUDA torch: what tests-cuda does",
}


def blocks():
    for page in PAGES:
        for match in FENCE.finditer((ROOT / page).read_text()):
            body = match.group(2)
            yield page, match.group(1), body.strip().splitlines()[0].strip(), body


BLOCKS = list(blocks())


def skip_reason(page: str, first: str) -> str | None:
    for (skip_page, prefix), why in SKIP.items():
        if page == skip_page and first.startswith(prefix):
            return why
    return None


def test_every_skip_entry_names_a_real_block():
    found = {
        (page, prefix)
        for page, _, first, _ in BLOCKS
        for (p, prefix) in SKIP
        if page == p and first.startswith(prefix)
    }
    assert set(SKIP) == found, f"stale SKIP entries: {set(SKIP) - found}"


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> Path:
    """A venv layered over the running environment (see the module docstring)."""
    env = tmp_path_factory.mktemp("overlay") / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    site_dir = next((env / "lib").glob("python3*/site-packages"))
    (site_dir / "_tierkit_overlay.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    bindir = env / "bin"
    for name, module in (("pip", "pip"), ("pytest", "pytest"), ("tierkit", "tierkit")):
        shim = bindir / name
        shim.write_text(f'#!/bin/sh\nexec "{bindir / "python"}" -m {module} "$@"\n')
        shim.chmod(0o755)
    return env


@pytest.mark.parametrize(
    ("page", "kind", "first", "body"), BLOCKS, ids=[f"{b[0]}:{b[2][:40]}" for b in BLOCKS]
)
def test_documented_block_runs_as_written(page, kind, first, body, overlay):
    why = skip_reason(page, first)
    if why:
        pytest.skip(f"not run here: {why}")
    env = {**os.environ, "PATH": f"{overlay / 'bin'}:{os.environ['PATH']}", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    if kind == "python":
        cmd = [str(overlay / "bin" / "python"), "-c", body]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", body]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"{page}: `{first}` failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
