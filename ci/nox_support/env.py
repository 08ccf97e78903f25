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
import shlex
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


def _env_plan(
    requirement_files, env_dir: Path, base: str
) -> tuple[str, Path, list[list[str]], list[list[str]]]:
    """What making `env_dir` up to date takes: its python, its stamp (the hash
    of the requirement files), the commands that create the venv (when it is
    missing) and the one that installs the requirements (when unstamped)."""
    files = sorted(set(requirement_files))
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        digest.update((ROOT / name).read_bytes())
    stamp = env_dir / ".tierkit-stamps" / digest.hexdigest()
    py = python(env_dir)
    create = [[base, "-m", "venv", str(env_dir)], [py, "-m", "pip", "install", "-q", "--upgrade", "pip"]]
    args = [arg for name in files for arg in ("-r", str(ROOT / name))]
    # pip writes every module's .pyc at install (transformers, peft and
    # accelerate: 16 s so, 2.8 s with --no-compile). Kept: these machines set
    # PYTHONDONTWRITEBYTECODE=1, so without them every process would compile
    # what it imports again (tried: the test steps ran 1-3 minutes longer).
    return py, stamp, create, [[py, "-m", "pip", "install", "-q", *args]]


# env_dir -> (the background process preparing it, its log)
_PREPARING: dict[Path, tuple[subprocess.Popen, Path]] = {}


def prepare_in_background(
    *requirement_files: str, env_dir: Path, base: str = BASE_PYTHON, pip_env: dict | None = None
) -> None:
    """Start making `env_dir` up to date in a background process, when it is
    not already: a torch install is minutes of download and unpacking that can
    overlap the compiling and testing done meanwhile. shared_env() waits for
    it (and redoes in the foreground whatever it did not finish)."""
    py, stamp, create, install = _env_plan(requirement_files, env_dir, base)
    if stamp.exists() or env_dir in _PREPARING:
        return
    steps = ([] if Path(py).exists() else create) + install + [["touch", str(stamp)]]
    script = f"set -e; mkdir -p {shlex.quote(str(stamp.parent))}; " + "; ".join(
        shlex.join(step) for step in steps
    )
    log = BUILD_DIR / "logs" / f"prepare{env_dir.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # The stamp comes last: an install cut short (ctrl-C) is redone by the next run.
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(pip_env or {})},
        )
    _PREPARING[env_dir] = (proc, log)


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
    if env_dir in _PREPARING:
        proc, log = _PREPARING.pop(env_dir)
        session.log(f"{env_dir.name}: waiting for its preparation in the background ({log})")
        if proc.wait() != 0:
            tail = log.read_text()[-2000:]
            session.warn(f"{env_dir.name}: the background preparation failed; redoing it here:\n{tail}")
    py, stamp, create, install = _env_plan(requirement_files, env_dir, base)
    if not Path(py).exists():
        for step in create:
            session.run(*step, external=True)
    if not stamp.exists():
        for step in install:
            session.run(*step, external=True, env=pip_env or {})
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


def pip_install_argv(py: str, path: Path, *args: str) -> list[str]:
    """pip-installing one source tree against what the env already holds."""
    return [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", *args, str(path)]


def pip_install(session: nox.Session, py: str, path: Path, *args: str, env: dict | None = None) -> None:
    session.run(*pip_install_argv(py, path, *args), external=True, env={**BUILD_ENV, **(env or {})})


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
