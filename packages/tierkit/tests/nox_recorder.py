"""Runs noxfile's session functions in nox's bootstrap venv (made by
ci/nox.sh) with a recording session: each command they would run is
recorded, not run, and printed as JSON for the test to read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BOOTSTRAP = ROOT / ".nox" / "_bootstrap" / "bin" / "python"

_PRELUDE = """
import json, sys
sys.argv = ["nox"]
sys.path.insert(0, {root!r})
import noxfile

class Recorder:
    posargs = []
    calls = []
    def run(self, *args, **kwargs):
        self.calls.append([str(a) for a in args])
    def log(self, *a): pass
    def warn(self, *a): pass
    # A check that fails (e.g. install_tiers' that the package is there, when
    # nothing was installed) is recorded, and the run goes on.
    def error(self, *a): self.calls.append(["error", *map(str, a)])

session = Recorder()
"""


def recorded(code: str, env_dir: Path) -> object:
    """What `code` (run after the prelude, with `session` and `noxfile` in
    scope) printed last, as JSON. The shared env is `env_dir`: recorded
    installs must never stamp the developer's .nox/_env."""
    if not BOOTSTRAP.exists():
        pytest.skip("nox's bootstrap venv (made by ci/nox.sh) is not here")
    proc = subprocess.run(
        [str(BOOTSTRAP), "-c", _PRELUDE.format(root=str(ROOT)) + code],
        capture_output=True,
        text=True,
        env={**os.environ, "TIERKIT_NOX_ENV": str(env_dir)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
