"""The `build` session's parts: every tier from its sdist, each wheel tried alone.

A tier is built the way a user installs it: `python -m build` makes the sdist,
then the wheel from that sdist (so a file missing from the sdist fails here).
Each wheel is then installed into a fresh venv with only what it declares,
resolved with --no-index from dist/ (earlier tiers' wheels) -- never from a
public index -- and imported. Torch is the one exception to "fresh": 5.5 GB
per venv is too much, so the venv sees the shared env's torch and the
packages torch requires (and nothing else) through a .pth file; pip still
checks the wheel's `torch==X.Y.Z` against it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .env import BASE_PYTHON, BUILD_DIR, BUILD_ENV, DIST_DIR, ROOT, mark_done, missing_modules, tier_stamp
from .tiers import TIERS, parallel_pytest_args

SMOKE_DIR = BUILD_DIR / "smoke"
WHEELHOUSE = BUILD_DIR / "wheelhouse"  # public build backends, downloaded once by name
BUILT = DIST_DIR / ".built"  # <tier>-<digest>: the wheel in dist/ is from these sources


def _dist_name(name: str) -> str:
    """The wheel/sdist file prefix of a tier: tierkit_torch for tierkit-torch."""
    text = (ROOT / TIERS[name].path / "pyproject.toml").read_text()
    match = re.search(r'^name = "([^"]+)"', text, re.MULTILINE)
    assert match, f"{name}: no project name in pyproject.toml"
    return match.group(1).replace("-", "_")


def wheel_of(name: str) -> Path:
    wheels = sorted(DIST_DIR.glob(f"{_dist_name(name)}-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"{name}: expected one wheel in {DIST_DIR}, found {[w.name for w in wheels]}")
    return wheels[0]


def build_from_sdist(session: nox.Session, py: str, name: str) -> Path:
    """sdist, then the wheel from that sdist, into dist/ (skipped when the
    wheel there was built from the same sources); returns the wheel. A tier
    with public build backends builds that wheel with build isolation, its
    requirements resolved only from dist/ and build/wheelhouse (one compile
    proves both that the sdist is complete and that no tier comes from an
    index); the torch tiers build without isolation, against the shared
    env's torch."""
    stamp = tier_stamp(name, BUILT)
    if stamp.exists():
        session.log(f"{name}: wheel in dist/ is up to date")
        return wheel_of(name)
    prefix = _dist_name(name)
    for old in [*DIST_DIR.glob(f"{prefix}-*.whl"), *DIST_DIR.glob(f"{prefix}-*.tar.gz")]:
        old.unlink()
    source = str(ROOT / TIERS[name].path)
    if TIERS[name].public_build_requires:
        session.run(
            py, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(DIST_DIR), source,
            external=True, env=BUILD_ENV,
        )  # fmt: skip
        isolated_build(session, py, name)
    else:
        session.run(
            py,
            "-m",
            "build",
            "--no-isolation",
            "--outdir",
            str(DIST_DIR),
            source,
            external=True,
            env=BUILD_ENV,
        )
    mark_done(stamp)
    return wheel_of(name)


def install_wheel(session: nox.Session, py: str, name: str, wheel: Path, force: bool = False) -> None:
    """Install a tier's wheel into the shared env and mark the tier up to date
    there, so the sessions after this one do not compile it again. `force`:
    even when the same sources are installed (from a source-tree build)."""
    stamp = tier_stamp(name)
    module = TIERS[name].module
    if stamp.exists() and not force and not missing_modules(py, [module]):
        return
    session.run(py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel), external=True)
    if missing_modules(py, [module]):
        session.error(f"{name}: pip installed {wheel.name}, yet {py} cannot find {module}")
    mark_done(stamp)


def _requirement_closure(root: str) -> list[importlib.metadata.Distribution]:
    """`root`'s distribution in the running env and everything it requires,
    extras included (markers evaluated here), found by walking Requires-Dist."""
    from packaging.requirements import Requirement  # in every env pip runs in

    seen: dict[str, importlib.metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(root, "")]
    while todo:
        name, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if (key, extra) in done:
            continue
        done.add((key, extra))
        try:
            dist = seen.get(key) or importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return list(seen.values())


TORCH_VIEW_SCRIPT = """
import json, sys
sys.path.insert(0, {support!r})
from nox_support.wheels import _requirement_closure
out = []
for dist in _requirement_closure("torch"):
    tops = {{str(f).split("/")[0] for f in (dist.files or []) if not str(f).startswith("..")}}
    out.append([str(dist.locate_file("")), sorted(tops)])
print(json.dumps(out))
"""


def torch_view(session: nox.Session, py: str) -> Path:
    """A directory of links to torch and what it requires, from the shared env."""
    import json

    view = SMOKE_DIR / "torch-view"
    if view.is_dir():
        return view
    listing = subprocess.check_output(
        [py, "-c", TORCH_VIEW_SCRIPT.format(support=str(ROOT / "ci"))], text=True
    )
    tmp = view.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for site, tops in json.loads(listing):
        for top in tops:
            if top and not (tmp / top).exists() and top not in {"bin", "__pycache__"}:
                (tmp / top).symlink_to(Path(site, top))
    tmp.rename(view)
    return view


def smoke_test(session: nox.Session, py: str, name: str) -> None:
    """The tier's wheel alone in a fresh venv: installed with --no-index from
    dist/ (its declared tier dependencies), `pip check`, then its smoke code."""
    tier = TIERS[name]
    venv = SMOKE_DIR / name
    shutil.rmtree(venv, ignore_errors=True)
    # Without pip (nor the setuptools Python < 3.12 venvs get, which would
    # shadow the newer one torch requires): the shared env's pip installs
    # into it with --python, so the venv holds only the wheel and what it
    # declares.
    session.run(BASE_PYTHON, "-m", "venv", "--without-pip", str(venv), external=True)
    vpy = str(venv / "bin" / "python")
    if tier.runtime_torch:
        site = subprocess.check_output([vpy, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
        Path(site.decode().strip(), "_shared_torch.pth").write_text(str(torch_view(session, py)) + "\n")
    pip = [py, "-m", "pip", "--python", vpy]
    session.run(
        *pip, "install", "-q", "--no-index", "--find-links", str(DIST_DIR), str(wheel_of(name)), external=True
    )  # fmt: skip
    session.run(*pip, "check", external=True)
    session.run(vpy, "-c", tier.smoke, external=True, env={"TIERKIT_SMOKE_VENV": str(venv)})


def _extract_data(archive: tarfile.TarFile, out: Path) -> None:
    """extractall with tarfile's "data" filter (no links, devices or paths
    outside `out`). The filter exists from Python 3.11.4 and 3.12; Debian 12's
    python3 is 3.11.2, so there the same rules are checked by hand."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(out, filter="data")
        return
    root = out.resolve()
    for member in archive.getmembers():
        target = (out / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(root):
            raise RuntimeError(
                f"{member.name}: not a plain file or directory inside {out}; refusing to extract"
            )
    archive.extractall(out)  # every member checked above


def isolated_build(session: nox.Session, py: str, name: str) -> None:
    """The wheel of `name` from its sdist in dist/, into dist/, with build
    isolation: the build requirements resolved only from dist/ (tiers) and
    build/wheelhouse (public backends, fetched by name beforehand), so
    `tierkit-core` can never come from an index."""
    tier = TIERS[name]
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    backends = hashlib.sha256(" ".join(tier.public_build_requires).encode()).hexdigest()[:12]
    if not (WHEELHOUSE / f".fetched-{backends}").exists():
        session.run(
            py, "-m", "pip", "download", "-q", "--dest", str(WHEELHOUSE), *tier.public_build_requires,
            external=True,
        )  # fmt: skip
        (WHEELHOUSE / f".fetched-{backends}").touch()
    sdist = sorted(DIST_DIR.glob(f"{_dist_name(name)}-*.tar.gz"))[-1]
    out = BUILD_DIR / "isolated" / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        _extract_data(archive, out)
    source = next(p for p in out.iterdir() if p.is_dir())
    session.run(
        py, "-m", "build", "--wheel", "--outdir", str(DIST_DIR), str(source),
        external=True,
        env={**BUILD_ENV, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{DIST_DIR} {WHEELHOUSE}"},
    )  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    session.log(f"{name}: wheel built with build isolation from {sdist.name}")


OLDEST_ENV = ROOT / ".nox" / "_torch_oldest"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_dist_wheels(
    session: nox.Session, env_py: str, wheels: list[Path], pip_env: dict | None = None
) -> None:
    """`wheels`, these very files (a tier's and the tiers it needs), into
    another env, replacing what an earlier run left there (the same version
    number with older code); only this repository's wheels, never an index
    (torch is already there), then `pip check`. `pip_env`: the environment
    that env's requirements were installed with (the newest torch's env must
    not see this machine's torch<=2.14.1 constraint, or pip "repairs" its
    torch 2.15.0 with the 2.13.0 on disk)."""
    session.run(
        env_py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall",
        *map(str, wheels), external=True, env=pip_env or {},
    )  # fmt: skip
    session.run(env_py, "-m", "pip", "check", external=True, env=pip_env or {})


def prepare_torch_envs() -> None:
    """Start installing the oldest and the newest torch (test_wheel_on_torches'
    second and third envs) in the background: ~3 minutes of download and
    unpacking, overlapped with the tiers' tests that run before."""
    from .env import prepare_in_background
    from .matrix import NEXT_ENV, TORCH_NEXT, UNCAPPED
    from .tiers import TORCH_OLDEST

    prepare_in_background(TORCH_OLDEST, env_dir=OLDEST_ENV)
    prepare_in_background(TORCH_NEXT, env_dir=NEXT_ENV, pip_env=UNCAPPED)


def test_wheel_on_torches(session: nox.Session, py: str, name: str, pytest_args: tuple[str, ...]) -> None:
    """The stable-ABI proof: one wheel, built once (from its sdist) against the
    shared env's torch, installed unchanged into that env, into one holding
    the oldest torch it targets and into one holding the newest release; the
    tier's tests run in all three, and the file's sha256 must not change."""
    from .env import shared_env
    from .matrix import UNCAPPED, next_torch_env
    from .tiers import TORCH_OLDEST

    tier = TIERS[name]
    needed = []
    for dep in tier.needs:  # core: the wheel's build requirement and runtime dependency
        needed.append(build_from_sdist(session, py, dep))
        install_wheel(session, py, dep, needed[-1])
    wheel = build_from_sdist(session, py, name)
    install_wheel(session, py, name, wheel, force=True)  # this very file, not a source-tree build
    oldest = shared_env(session, TORCH_OLDEST, env_dir=OLDEST_ENV)
    newest = next_torch_env(session)
    install_dist_wheels(session, oldest, [*needed, wheel])
    install_dist_wheels(session, newest, [*needed, wheel], pip_env=UNCAPPED)
    digest = sha256(wheel)
    tests = str(ROOT / tier.path / "tests")
    for label, env_py in (("shared env", py), ("oldest torch", oldest), ("newest torch", newest)):
        version = subprocess.check_output([env_py, "-c", "import torch; print(torch.__version__)"], text=True)
        session.log(f"==== {wheel.name} (sha256 {digest[:16]}…) under torch {version.strip()} ({label})")
        parallel = parallel_pytest_args(env_py) if tier.parallel_tests and not pytest_args else ()
        session.run(
            env_py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *parallel, tests, *pytest_args,
            external=True,
        )  # fmt: skip
    assert sha256(wheel) == digest, "the wheel changed between the runs"
    session.log(f"one wheel, three torches: {wheel.name} sha256 {digest}")
    refuse_other_torch(session, oldest)


def refuse_other_torch(session: nox.Session, oldest: str) -> None:
    """The contrast: torch-cpu's wheel (tied to the torch it was built against)
    imported under the oldest torch must raise an ImportError naming both
    versions, not the loader's `undefined symbol`."""
    tied = sorted(DIST_DIR.glob(f"{_dist_name('torch')}-*.whl"))
    if not tied:
        session.log("torch-cpu's wheel is not in dist/ (run the build session): mismatch check skipped")
        return
    session.run(
        oldest, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(tied[-1]), external=True
    )
    try:
        probe = subprocess.run([oldest, "-c", "import tierkit_torch"], capture_output=True, text=True)
    finally:
        session.run(oldest, "-m", "pip", "uninstall", "-q", "-y", _dist_name("torch"), external=True)
    message = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ""
    session.log(f"tierkit_torch under the oldest torch: {message}")
    if probe.returncode == 0 or not message.startswith("ImportError: tierkit_torch was built against torch"):
        session.error(f"expected an ImportError naming both torch versions, got: {probe.stderr[-600:]}")
