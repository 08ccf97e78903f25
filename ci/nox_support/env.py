"""The one shared virtual environment, .nox/_env, and installing tiers into it.

torch alone is 1-5.5 GB and must not be installed per session, so every
Python-facing session reuses .nox/_env. A stamp holding the hash of the
requirement files makes re-runs skip pip; a stamp per tier holding the hash
of its sources (and its dependencies') makes unchanged tiers skip rebuilding.
"""

from __future__ import annotations

import hashlib
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .tiers import TIERS

ROOT = Path(__file__).resolve().parents[2]
# TIERKIT_NOX_ENV moves the shared env (and its stamps) elsewhere: tests that
# drive the sessions with a recording fake point it at a scratch folder, so
# they can never stamp a tier in the developer's env that was not installed.
ENV_DIR = Path(os.environ.get("TIERKIT_NOX_ENV") or ROOT / ".nox" / "_env")
STAMPS = ENV_DIR / ".tierkit-stamps"
BUILD_DIR = ROOT / "build"
DIST_DIR = ROOT / "dist"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)

_cuda = runpy.run_path(str(ROOT / "packages/torch-cuda/src/tierkit_cuda/cuda_defaults.py"))
MAX_JOBS = os.environ.get("MAX_JOBS", "2")
BUILD_ENV = {
    "MAX_JOBS": MAX_JOBS,
    "CMAKE_BUILD_PARALLEL_LEVEL": MAX_JOBS,
    "CMAKE_GENERATOR": "Ninja",
    "TORCH_CUDA_ARCH_LIST": _cuda["arch_list"](),
}
if _cuda["cuda_home"]():
    BUILD_ENV["CUDA_HOME"] = _cuda["cuda_home"]()


def has_cuda_toolkit() -> bool:
    return Path(BUILD_ENV.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc").exists()


def python(env_dir: Path = ENV_DIR) -> str:
    return str(env_dir / "bin" / "python")


def shared_env(
    session: nox.Session,
    *requirement_files: str,
    env_dir: Path = ENV_DIR,
    base: str = BASE_PYTHON,
    pip_env: dict | None = None,
) -> str:
    """Create/refresh a venv (.nox/_env unless told; from the `base`
    interpreter) with the given requirement files; return its python.
    `pip_env`: extra environment for the requirements' pip install."""
    files = sorted(set(requirement_files))
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        digest.update((ROOT / name).read_bytes())
    stamp = env_dir / ".tierkit-stamps" / digest.hexdigest()
    py = python(env_dir)
    if not Path(py).exists():
        session.run(base, "-m", "venv", str(env_dir), external=True)
        session.run(py, "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
    if not stamp.exists():
        args = [arg for name in files for arg in ("-r", str(ROOT / name))]
        session.run(py, "-m", "pip", "install", "-q", *args, external=True, env=pip_env or {})
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    return py


SKIP_PARTS = {"build", "__pycache__", ".pytest_cache", "dist"}


def tier_digest(name: str) -> str:
    """Hash of a tier's sources, of the requirement files it builds with (a
    torch bump must rebuild a library compiled against torch) and of the
    tiers it builds on."""
    digest = hashlib.sha256()
    for dep in TIERS[name].needs:
        digest.update(tier_digest(dep).encode())
    for requirements in TIERS[name].requirements:
        digest.update((ROOT / requirements).read_bytes())
    root = ROOT / TIERS[name].path
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (
            path.is_file()  # follows links: VERSION and LICENSE count by content
            and not SKIP_PARTS.intersection(rel.parts)
            and not any(part.endswith(".egg-info") for part in rel.parts)
        ):
            digest.update(str(rel).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def tier_stamp(name: str, directory: Path = STAMPS) -> Path:
    """The file whose existence says: tier `name`, from its current sources,
    is already installed (or built) where `directory` keeps its stamps."""
    return directory / f"{name}-{tier_digest(name)}"


def mark_done(stamp: Path) -> None:
    """Make `stamp` the one stamp of its tier in its directory."""
    tier = stamp.name.rsplit("-", 1)[0]
    for old in stamp.parent.glob(f"{tier}-*"):
        old.unlink()
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


def pip_install(session: nox.Session, py: str, path: Path, *args: str, env: dict | None = None) -> None:
    """pip-install one source tree against what the env already holds."""
    session.run(
        py,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        *args,
        str(path),
        external=True,
        env={**BUILD_ENV, **(env or {})},
    )


_FIND_MODULES = """
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
"""


def missing_modules(py: str, modules: list[str]) -> set[str]:
    """Which of `modules` the interpreter `py` cannot find (found, not
    imported: importing the torch tiers would cost seconds a call)."""
    if not modules:
        return set()
    if not Path(py).exists():
        return set(modules)
    proc = subprocess.run([py, "-c", _FIND_MODULES, *modules], capture_output=True, text=True)
    if proc.returncode != 0:
        return set(modules)
    return set(proc.stdout.split())


def install_tiers(session: nox.Session, py: str, names, stamps: Path = STAMPS) -> None:
    """pip-install tiers in order, skipping those unchanged since their last install.

    Reinstalling an unchanged tier would rewrite core's headers with new
    mtimes and make every tier above rebuild from scratch. A stamp vouches
    only for what is really there: a stamped tier whose package `py` cannot
    find (removed by hand, or stamped by a failed run) is reinstalled; a
    stamp is written only once the install succeeded and its package is found.
    """
    names = list(names)
    stamped = [name for name in names if tier_stamp(name, stamps).exists()]
    gone = missing_modules(py, [TIERS[name].module for name in stamped])
    for name in names:
        stamp = tier_stamp(name, stamps)
        if stamp.exists() and TIERS[name].module not in gone:
            session.log(f"{name}: installed and up to date")
            continue
        if stamp.exists():
            session.log(
                f"{name}: stamped as installed, but {py} cannot find {TIERS[name].module}: reinstalling"
            )
            stamp.unlink()
        pip_install(session, py, ROOT / TIERS[name].path, "--force-reinstall")
        if missing_modules(py, [TIERS[name].module]):
            session.error(
                f"{name}: pip installed {TIERS[name].path}, yet {py} cannot find {TIERS[name].module}"
            )
        mark_done(stamp)
