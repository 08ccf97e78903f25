"""The workspace's own machinery (ci/nox_support), tested where the tools are:
what a newcomer relies on without reading it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nox_recorder import recorded

ROOT = Path(__file__).resolve().parents[3]


def run_support(code: str, **env: str) -> str:
    import os

    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'ci')!r})\n{code}"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    return result.stdout.strip()


def test_no_cuda_toolkit_means_cuda_tiers_are_skipped_not_failed():
    # build, demo, bench and tests all ask has_cuda_toolkit() before a CUDA tier.
    out = run_support(
        "from nox_support import env; print(env.has_cuda_toolkit(), env.BUILD_ENV['CUDA_HOME'])",
        CUDA_HOME="/nonexistent/cuda",
    )
    assert out == "False /nonexistent/cuda"
    noxfile = (ROOT / "noxfile.py").read_text()
    for session in ("def build(", "def demo(", "def bench(", "def run_tier_tests("):
        body = noxfile.split(session, 1)[1].split("\n@nox.session", 1)[0]
        assert "runnable(" in body or "has_cuda_toolkit()" in body, session


def test_tier_digest_ignores_build_outputs(tmp_path):
    # An egg-info directory (anywhere, e.g. src/tierkit_torch.egg-info) or build/ must not
    # make a tier look changed: it would rebuild for nothing.
    code = (
        "from nox_support import env, tiers\n"
        "from pathlib import Path\n"
        "import shutil\n"
        "before = env.tier_digest('tools')\n"
        "egg = env.ROOT / tiers.TIERS['tools'].path / 'src' / 'tierkit_probe.egg-info'\n"
        "egg.mkdir(); (egg / 'PKG-INFO').write_text('x')\n"
        "try:\n    print(before == env.tier_digest('tools'))\n"
        "finally:\n    shutil.rmtree(egg)\n"
    )
    assert run_support(code) == "True"


def test_tier_table_is_complete():
    out = run_support(
        "from nox_support.tiers import TIERS\n"
        "from nox_support.env import ROOT\n"
        "print(all((ROOT / t.path / 'pyproject.toml').exists() for t in TIERS.values()), sorted(TIERS))"
    )
    assert out.startswith("True")


RECORD_SESSION = """
noxfile.run_tier_tests(session, "core", "-R", "Kernels")
ctest = [c for c in session.calls if c[0] == "ctest"]
session.calls.clear()
noxfile.run_tier_tests(session, "torch", "-k", "forward_ad", "-x")
torch = [c for c in session.calls if "pytest" in c]
session.calls.clear()
noxfile.run_cross_tier_tests(session, "-k", "journey")
cross = [c for c in session.calls if "pytest" in c]
print(json.dumps([ctest[0], torch[-1], cross[-1]]))
"""


def test_sessions_pass_their_arguments_to_the_runner(tmp_path):
    # `bash ci/nox.sh -s tests-core -- -R Kernels` once ran all 88 tests
    # silently. These are README.md's "Running one test" commands, recorded
    # instead of run (test_docs skips them: each is a session CI runs whole).
    # The shared env is a scratch folder here: recorded installs once stamped
    # tiers as installed in the developer's .nox/_env that never were.
    ctest, torch, cross = recorded(RECORD_SESSION, tmp_path / "env")
    assert ctest[-2:] == ["-R", "Kernels"]
    assert torch[-3:] == ["-k", "forward_ad", "-x"] and torch[-4].endswith("packages/torch-cpu/tests")
    assert cross[-2:] == ["-k", "journey"] and cross[-3] == str(ROOT / "tests")


STAMP_RUN = """
import json
from nox_support import env

class Failed(Exception):
    pass

class Session:
    def __init__(self):
        self.calls, self.logs = [], []
    def run(self, *args, **kwargs):  # pip "succeeds" without installing anything
        self.calls.append([str(a) for a in args])
    def log(self, msg):
        self.logs.append(msg)
    def error(self, msg):
        raise Failed(msg)

def install(stamped):
    session = Session()
    stamp = env.tier_stamp("bridge")
    if stamped:
        env.mark_done(stamp)
    try:
        env.install_tiers(session, {py!r}, ["bridge"])
        error = None
    except Failed as e:
        error = str(e)
    return {{"pip": any("pip" in c for c in session.calls), "logs": session.logs,
             "error": error, "stamped": stamp.exists()}}

print(json.dumps([install(stamped=True), install(stamped=False)]))
"""


def test_a_stamp_vouches_only_for_a_tier_that_is_really_there(tmp_path):
    # A stamped tier whose package this Python cannot find is reinstalled with
    # a line saying why, and an install after which the package is still not
    # there leaves no stamp behind. The stamps live in a scratch env; the
    # Python asked is a bare venv's, which has no tierkit_bridge.
    import venv

    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    py = str(bare / "bin" / "python")
    out = run_support(STAMP_RUN.format(py=py), TIERKIT_NOX_ENV=str(tmp_path / "env"))
    stale, fresh = json.loads(out.splitlines()[-1])
    assert stale["pip"] and any("cannot find tierkit_bridge: reinstalling" in line for line in stale["logs"])
    assert "yet" in stale["error"] and "cannot find tierkit_bridge" in stale["error"]
    assert not stale["stamped"], "a failed reinstall left the stale stamp in place"
    assert fresh["pip"] and fresh["error"] and not fresh["stamped"]


def test_the_workspace_guard_sees_a_stamp_and_a_stray_file(tmp_path):
    # The guard every test runs under (conftest.py), on a scratch repository
    # and stamp folder: a new stamp and a new untracked file are both changes.
    import workspace_guard

    repo, stamps = tmp_path / "repo", tmp_path / "stamps"
    stamps.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    before = workspace_guard.state([stamps], repo)
    (stamps / "bridge-0123456789abcdef").touch()
    (repo / "inputs.bin").write_bytes(b"x")
    after = workspace_guard.state([stamps], repo)
    assert workspace_guard.changed(before, after) == sorted([str(stamps), "source tree (git status)"])
    assert workspace_guard.changed(after, workspace_guard.state([stamps], repo)) == []
