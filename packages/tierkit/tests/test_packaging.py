"""What packaging relies on (issue: every tier from its sdist, one version,
torch pinned and checked): checked on the repository's files and, where the
tiers are installed, on their metadata."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TIERS = ["cpp-core", "pybind-bridge", "torch-cpu", "torch-cuda", "torch-stable", "tierkit"]
VERSION = (ROOT / "VERSION").read_text().strip()


@pytest.mark.parametrize("tier", TIERS)
def test_one_version_and_license(tier):
    path = ROOT / "packages" / tier
    assert (path / "VERSION").read_text().strip() == VERSION
    assert (path / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    pyproject = (path / "pyproject.toml").read_text()
    assert 'dynamic = ["version"' in pyproject and "\nversion =" not in pyproject.split("[tool")[0]
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
    # Inter-tier build requirements follow the one version (X.Y.*).
    major_minor = ".".join(VERSION.split(".")[:2])
    for pin in re.findall(r'"tierkit-[a-z-]+==([^"]+)"', pyproject):
        assert pin == f"{major_minor}.*", (tier, pin)


def test_floors_the_metadata_needs():
    base = (ROOT / "ci/requirements-base.txt").read_text()
    assert re.search(r"^setuptools>=77\b", base, re.MULTILINE)  # PEP 639 license strings
    assert re.search(r"^pybind11>=3\.0\b", base, re.MULTILINE)
    for tier in ("torch-cpu", "torch-cuda", "torch-stable"):
        assert '"setuptools>=77"' in (ROOT / "packages" / tier / "pyproject.toml").read_text(), tier


def test_cxx_flags_match_the_cmake_target():
    tierkit_core = pytest.importorskip("tierkit_core", reason="tierkit-core is not installed here")

    cmake = (ROOT / "packages/cpp-core/CMakeLists.txt").read_text()
    options = cmake.split("target_compile_options(tierkit_core INTERFACE", 1)[1].split("\n)", 1)[0]
    assert sorted(re.findall(r":(-[fW][\w=-]+)>", options)) == sorted(tierkit_core.cxx_flags())
    assert "-ffp-contract=off" in tierkit_core.cxx_flags()


@pytest.mark.parametrize("tier", ["torch-cpu", "torch-cuda", "torch-stable"])
def test_sdists_carry_every_source(tier):
    manifest = (ROOT / "packages" / tier / "MANIFEST.in").read_text()
    assert "graft csrc" in manifest and "include VERSION LICENSE" in manifest
    if tier == "torch-cpu":
        assert "graft include" in manifest  # torch-cuda builds against these headers


def test_torch_requirement_is_the_exact_release():
    torch_build = pytest.importorskip(
        "tierkit_torch_common.build", reason="tierkit-core is not installed here"
    )
    torch_requirement = torch_build.torch_requirement

    assert torch_requirement(types.SimpleNamespace(__version__="2.14.1+cu130")) == "torch==2.14.1"
    assert torch_requirement(types.SimpleNamespace(__version__="2.13.0+cpu")) == "torch==2.13.0"


def test_mismatched_torch_is_refused_with_both_versions():
    torch_build = pytest.importorskip(
        "tierkit_torch_common.build", reason="tierkit-core is not installed here"
    )
    require_built_torch = torch_build.require_built_torch

    require_built_torch("tierkit_torch", "2.14.1+cu130", "2.14.1+cpu", "packages/torch-cpu")  # same release
    with pytest.raises(ImportError) as info:
        require_built_torch("tierkit_torch", "2.14.1+cu130", "2.13.0+cpu", "packages/torch-cpu")
    message = str(info.value)
    assert "built against torch 2.14.1 but torch 2.13.0 is installed" in message
    assert "pip install torch==2.14.1" in message and "--no-build-isolation" in message


@pytest.mark.parametrize(
    ("dist", "module"), [("tierkit-torch", "tierkit_torch"), ("tierkit-cuda", "tierkit_cuda")]
)
def test_installed_torch_tier_requires_the_torch_it_was_built_against(dist, module):
    try:
        requires = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here")
    info = __import__(f"{module}._build_info", fromlist=["TORCH_VERSION"])
    assert f"torch=={info.TORCH_VERSION.split('+')[0]}" in requires
    assert any(r.startswith("tierkit-core==") for r in requires)


@pytest.mark.parametrize(
    ("dist", "module"),
    [("tierkit-core", "tierkit_core"), ("tierkit-bridge", "tierkit_bridge"), ("tierkit", "tierkit")],
)
def test_version_comes_from_the_installed_metadata(dist, module):
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here")
    assert version == VERSION
    assert __import__(module).__version__ == version


def _disk_space(tmp_path, free_kb: dict[str, int], **env_vars: str) -> subprocess.CompletedProcess:
    """ci/disk-space.sh with a fake df reporting `free_kb` per folder (others: 100 GB)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    cases = "".join(f'  "{path}") free={kb} ;;\n' for path, kb in free_kb.items())
    df = bindir / "df"
    df.write_text(
        f'#!/bin/sh\nfree=104857600\ncase "$2" in\n{cases}esac\n'
        'echo "Filesystem 1024-blocks Used Available Capacity Mounted on"\n'
        'echo "/dev/fake 1 1 $free 1% /"\n'
    )
    df.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", **env_vars}
    return subprocess.run(
        ["bash", str(ROOT / "ci/disk-space.sh")], capture_output=True, text=True, env=env, timeout=60
    )


def test_disk_space_passes_with_room(tmp_path):
    proc = _disk_space(tmp_path, {}, TMPDIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_disk_space_names_the_full_checkout_what_it_needs_and_has(tmp_path):
    proc = _disk_space(tmp_path, {str(ROOT): 3 * 1048576}, TMPDIR=str(tmp_path), TIERKIT_MIN_FREE_GB="10")
    assert proc.returncode == 1
    assert f"tierkit: {ROOT} has 3 GB free; this run" in proc.stderr
    assert "needs at least 10 GB" in proc.stderr


def test_disk_space_names_a_full_temp_directory(tmp_path):
    proc = _disk_space(tmp_path, {str(tmp_path): 3500}, TMPDIR=str(tmp_path))
    assert proc.returncode == 1
    assert f"tierkit: {tmp_path} has 0 GB free; the temp directory" in proc.stderr
    assert str(ROOT) not in proc.stderr  # the checkout itself has room


def test_nox_entry_point_checks_disk_before_anything_else():
    lines = (ROOT / "ci/nox.sh").read_text().splitlines()
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert commands[0] == "bash ci/disk-space.sh"


def _system_deps(tmp_path, include_dir: Path) -> subprocess.CompletedProcess:
    """ci/system-deps.sh with a fake python3 (outside /usr/bin) whose sysconfig
    include dir is `include_dir`, and an apt-get that only records its calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    python3 = bindir / "python3"
    python3.write_text(
        '#!/bin/sh\ncase "$2" in *sysconfig*) echo "' + str(include_dir) + '" ;; esac\nexit 0\n'
    )
    apt = bindir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "apt.log"}\n')
    for exe in (python3, apt):
        exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(ROOT / "ci/system-deps.sh")], capture_output=True, text=True, env=env, timeout=60
    )


def test_system_deps_names_missing_python_headers_of_a_non_system_python(tmp_path):
    proc = _system_deps(tmp_path, tmp_path / "no-such-include")
    assert proc.returncode == 1
    assert f"{tmp_path / 'no-such-include'}/Python.h is missing" in proc.stderr
    assert f"{tmp_path / 'bin' / 'python3'} was installed without its" in proc.stderr
    assert not (tmp_path / "apt.log").exists()  # not apt's business: it is not Debian's python


def test_system_deps_accepts_headers_where_sysconfig_says(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "Python.h").write_text("")
    proc = _system_deps(tmp_path, include)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "apt.log").read_text() if (tmp_path / "apt.log").exists() else ""
    assert "python3-dev" not in log


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no system python3 at /usr/bin")
def test_system_deps_with_the_distribution_python(tmp_path):
    # Debian's own interpreter first on PATH: its headers are python3-dev's.
    env = {**os.environ, "PATH": f"/usr/bin:{os.environ['PATH']}"}
    include = subprocess.check_output(
        ["/usr/bin/python3", "-c", "import sysconfig; print(sysconfig.get_path('include'))"], text=True
    ).strip()
    if not Path(include, "Python.h").exists():
        pytest.skip(f"python3-dev is not installed here ({include}/Python.h)")
    proc = subprocess.run(
        ["bash", str(ROOT / "ci/system-deps.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
