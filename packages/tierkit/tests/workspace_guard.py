"""What a test must leave as it found it: the shared env's installed
packages and its stamps, the build stamps of dist/, and the source tree
(what git sees). A test that drove the sessions with a recording fake once
stamped tiers as installed that never were; conftest.py's autouse fixture
makes any such test fail where it runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ENV = ROOT / ".nox" / "_env"


def watched() -> list[Path]:
    return [ENV / ".tierkit-stamps", ROOT / "dist" / ".built", *ENV.glob("lib/python*/site-packages")]


def state(folders: list[Path] | None = None, repo: Path = ROOT) -> dict:
    found: dict = {}
    for folder in watched() if folders is None else folders:
        if folder.is_dir():
            found[str(folder)] = sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    git = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
    )
    found["source tree (git status)"] = set(git.stdout.splitlines()) if git.returncode == 0 else None
    return found


def changed(before: dict, after: dict) -> list[str]:
    return sorted(where for where in before.keys() | after.keys() if before.get(where) != after.get(where))
