"""The test matrix beyond the shared env's Python 3.11 and torch 2.14.1.

Python: the tiers whose wheels depend on the interpreter (core's, the
bridge's, the tools') are built and tested under each of PYTHONS, each in its
own small venv (.nox/_py<version>, no torch); the torch tiers' cp310-abi3
wheels, built once by the build session, are installed unchanged into a
Python 3.13 venv with torch from the registry. A Python this machine lacks is
skipped with a line saying so.

torch: the newest release (TORCH_NEXT) gets its own venv, .nox/_torch_next,
where the stable tier's one wheel runs (see wheels.py) and torch-cpu and
torch-cuda are rebuilt from source (tests-torch-next).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .env import BUILD_DIR, BUILD_ENV, ROOT, has_cuda_toolkit, install_tiers, shared_env
from .tiers import BASE, TIERS, with_deps

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
PER_PYTHON_TIERS = ("core", "bridge", "tools")  # their wheels are built per interpreter
MATRIX = "ci/requirements-matrix.txt"
TORCH_NEXT = "ci/requirements-torch-next.txt"
NEXT_ENV = ROOT / ".nox" / "_torch_next"
# This machine's pip is capped at torch 2.14.1 (/etc/xdg/pip, /etc/pip.conf);
# without any config file the registry's newest release is found. Only the
# next-torch env's requirement install runs this way.
UNCAPPED = {"PIP_CONFIG_FILE": os.devnull}
# The Python the torch tiers' abi3 wheels are also tried under.
ABI3_PYTHON = "3.13"
# The cells the `tests` session (so CI) runs beyond 3.11 and torch 2.14.1:
# the newest Python for the per-Python tiers (a few minutes: the bridge
# compiles again). The stable wheel under the newest torch runs in
# tests-stable. Every other cell is on demand (README's session table).
CI_CELLS = (("core", "3.13"), ("bridge", "3.13"))


def find_python(version: str) -> str | None:
    """An interpreter for `version` ("3.13"): pyenv's, else python3.13 on PATH."""
    candidates: list[Path] = []
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates += sorted(Path(root, "versions").glob(f"{version}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(Path(on_path))
    for exe in candidates:
        probe = subprocess.run(
            [str(exe), "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return str(exe)
    return None


def python_env(session: nox.Session, version: str, *requirements: str, suffix: str = "") -> str | None:
    """The venv .nox/_py<version><suffix> with `requirements`; its python, or
    None (after a line saying so) when this machine has no such Python."""
    exe = find_python(version)
    if exe is None:
        session.warn(f"Python {version}: not found (pyenv versions, or python{version} on PATH): skipped")
        return None
    return shared_env(
        session, MATRIX, *requirements, env_dir=ROOT / ".nox" / f"_py{version}{suffix}", base=exe
    )


def test_tier_on_python(session: nox.Session, name: str, version: str, pytest_args: tuple[str, ...]) -> bool:
    """Build tier `name` (and what it needs) from source with Python `version`
    into that version's venv and run its pytest there; False when skipped."""
    py = python_env(session, version)
    if py is None:
        return False
    names = [*TIERS[name].needs, name]
    install_tiers(session, py, names, stamps=Path(py).parents[1] / ".tierkit-stamps")
    tests = ROOT / TIERS[name].path / "tests"
    if TIERS[name].kind == "ctest":
        tests = tests / "python"  # the installed wheel's check; CTest is the same C++ on any Python
    session.log(f"==== {name} on Python {version}")
    session.run(
        py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests), *pytest_args,
        external=True, env={**BUILD_ENV, "TIERKIT_JIT_BUILD_DIR": str(BUILD_DIR / f"jit-{name}-{version}")},
    )  # fmt: skip
    return True


def test_abi3_wheels_on_python(session: nox.Session, py: str, pytest_args: tuple[str, ...]) -> None:
    """torch-cpu's and torch-stable's wheels (cp310-abi3) from dist/, built once
    with the shared env's Python, installed unchanged under ABI3_PYTHON with
    the pinned torch (the registry's wheel for that Python) and tested there."""
    from .tiers import TORCH
    from .wheels import build_from_sdist, sha256

    # The two tiers and what their wheels require (core, torch-common).
    wheels = {
        name: build_from_sdist(session, py, name)
        for name in dict.fromkeys([*with_deps("torch"), *with_deps("stable")])
    }
    for name in ("torch", "stable"):
        assert wheels[name].name.endswith("-cp310-abi3-linux_x86_64.whl"), wheels[name].name
    vpy = python_env(session, ABI3_PYTHON, TORCH, suffix="-torch")
    if vpy is None:
        return
    session.run(vpy, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", *map(str, wheels.values()),
                external=True)  # fmt: skip
    for name in ("torch", "stable"):
        digest = sha256(wheels[name])
        session.log(f"==== {wheels[name].name} (sha256 {digest[:16]}…) under Python {ABI3_PYTHON}")
        session.run(
            vpy, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / TIERS[name].path / "tests"),
            *pytest_args, external=True,
            env={**BUILD_ENV, "TIERKIT_JIT_BUILD_DIR": str(BUILD_DIR / f"jit-{name}-{ABI3_PYTHON}")},
        )  # fmt: skip
        assert sha256(wheels[name]) == digest, f"{wheels[name].name} changed while its tests ran"


def next_torch_env(session: nox.Session, *requirements: str) -> str:
    """.nox/_torch_next with the newest torch (TORCH_NEXT) and `requirements`."""
    return shared_env(session, TORCH_NEXT, *requirements, env_dir=NEXT_ENV, pip_env=UNCAPPED)


def test_torch_next(session: nox.Session, pytest_args: tuple[str, ...]) -> None:
    """torch-cpu from source against TORCH_NEXT and its tests; then torch-cuda's
    build and its CPU-side tests where a CUDA toolkit is. torch-cuda's build
    compiles against that torch's CUDA headers with the local nvcc: when that
    fails, the doctor explains the log and the CUDA part is skipped, saying why."""
    py = next_torch_env(session, BASE)
    stamps = NEXT_ENV / ".tierkit-stamps"
    # torch-cpu's tests compare with the tierkit_stable ops (test_aten_semantics
    # imports tierkit_torch_stable): the stable tier goes in too, or a stale
    # copy from an earlier run answers instead.
    install_tiers(
        session, py, list(dict.fromkeys([*with_deps("torch"), *with_deps("stable")])), stamps=stamps
    )
    version = subprocess.check_output([py, "-c", "import torch; print(torch.__version__)"], text=True).strip()
    session.log(f"==== torch-cpu built against torch {version}")
    jit = {"TIERKIT_JIT_BUILD_DIR": str(BUILD_DIR / "jit-torch-next")}
    session.run(
        py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / TIERS["torch"].path / "tests"),
        *pytest_args, external=True, env={**BUILD_ENV, **jit},
    )  # fmt: skip
    if not has_cuda_toolkit():
        session.warn("torch-cuda against the newest torch: skipped, no CUDA toolkit (set CUDA_HOME)")
        return
    log = BUILD_DIR / "torch-next-cuda-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    build = subprocess.run(
        [py, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--force-reinstall",
         str(ROOT / TIERS["cuda"].path)],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **BUILD_ENV},
    )  # fmt: skip
    if build.returncode != 0:
        install_tiers(session, py, ["tools"], stamps=stamps)
        session.run(py, "-m", "tierkit", "doctor", "explain", str(log), external=True, success_codes=[0, 1])
        session.warn(
            f"torch-cuda against torch {version}: skipped, its build failed (log: {log}; the doctor's reading above)"
        )
        return
    session.log(
        f"==== torch-cuda built against torch {version}: its CPU-side tests (GPU tests skip without a GPU)"
    )
    session.run(
        py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / TIERS["cuda"].path / "tests"),
        *pytest_args, external=True, env=BUILD_ENV,
    )  # fmt: skip
