"""ci/nox_support/prebuild.py: builds run early in the background, at the
lowest priority, for the sessions later in the same nox run; a session
waits for its build, takes over one not started, and redoes one that failed."""

from __future__ import annotations

import os
import sys
import time

import pytest
from nox_recorder import ROOT

sys.path.insert(0, str(ROOT / "ci"))
from nox_support import prebuild


class Session:
    def __init__(self):
        self.logs, self.warnings = [], []

    def log(self, text):
        self.logs.append(text)

    def warn(self, text):
        self.warnings.append(text)


def started(key: str) -> None:
    deadline = time.monotonic() + 10
    while prebuild.state(key) == "queued":
        assert time.monotonic() < deadline, f"{key} never started"
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def logs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuild, "BUILD_DIR", tmp_path)


@pytest.mark.parametrize(
    "argv, sessions",
    [
        (
            ["-s", "build", "lint", "tests", "sanitize", "fuzz"],
            {"build", "lint", "tests", "sanitize", "fuzz"},
        ),
        (["-s", "build", "-s", "tests", "-r"], {"build", "tests"}),
        (["--sessions", "tests-core", "--", "-R", "Kernels"], {"tests-core"}),
        (["--no-venv"], {"tests"}),  # nox's default session
    ],
)
def test_the_sessions_named_on_noxs_command_line(argv, sessions):
    assert prebuild.requested_sessions(argv) == sessions


def test_a_build_runs_in_order_niced_and_is_waited_for(tmp_path):
    out = tmp_path / "out"
    session_id = f"{sys.executable} -c 'import os; print(os.getsid(0))' >> {out}"
    prebuild.queue(
        "first",
        [
            (["sh", "-c", f"sleep 0.5; nice > {out}; {session_id}"], {}),
            (["sh", "-c", f"echo $MARK >> {out}"], {"MARK": "two"}),
        ],
    )
    session = Session()
    started("first")
    assert prebuild.wait(session, "first")
    # Niceness 19 in nox's own session (a session of its own would be a CPU
    # group of its own where the kernel groups by session: nice would not
    # hold it back), the steps in order, the environment added.
    assert out.read_text().split() == ["19", str(os.getsid(0)), "two"]
    assert not session.warnings


def test_a_build_not_started_is_the_callers(tmp_path):
    prebuild.queue("busy", [(["sleep", "1"], {})])
    started("busy")
    prebuild.queue("later", [(["touch", str(tmp_path / "ran")], {})])
    session = Session()
    assert not prebuild.wait(session, "later")  # taken off the queue: the caller builds it
    assert prebuild.wait(session, "busy")
    assert any("waiting for busy" in line for line in session.logs)
    assert not (tmp_path / "ran").exists() and prebuild.state("later") == "cancelled"


def test_a_failed_build_is_reported_and_its_later_steps_skipped(tmp_path):
    prebuild.queue(
        "broken",
        [(["sh", "-c", "echo compiler says no; exit 3"], {}), (["touch", str(tmp_path / "ran")], {})],
    )
    session = Session()
    started("broken")
    assert not prebuild.wait(session, "broken")
    assert len(session.warnings) == 1 and "compiler says no" in session.warnings[0]
    assert not (tmp_path / "ran").exists()


def test_a_build_never_queued_is_the_callers():
    assert not prebuild.wait(Session(), "never-queued")


def test_the_emulation_builds_install_their_tools_first():
    """Queued at the start of CI's run, before the tests session installs the
    cross compiler and qemu, each emulation build failed its configure and was
    redone in the foreground; its first step now installs them (a no-op where
    they are), and the foreground waits for it before any apt-get of its own."""
    from nox_support import emulation

    for steps in (emulation.aarch64_build_steps(subset=True), emulation.x86_build_steps(subset=True)):
        argv, _env = steps[0]
        assert argv[:1] == ["bash"] and argv[1].endswith("ci/system-deps.sh") and argv[2:] == ["emulation"]
        assert any(a[0] == "cmake" for a, _ in steps[1:]), "the build itself follows"
