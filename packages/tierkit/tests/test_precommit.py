""".pre-commit-config.yaml does what CONTRIBUTING.md says `pre-commit install`
sets up: the file-level lint checks on commit, the lint session on push, in a
fresh clone (before any nox session has made .nox/_env)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONFIG = (ROOT / ".pre-commit-config.yaml").read_text()


def _list(key: str, text: str) -> list[list[str]]:
    """Every `key: [a, b]` flow list in `text` (the form this config uses)."""
    return [
        re.findall(r'"([^"]*)"', items) or [item.strip() for item in items.split(",")]
        for items in re.findall(rf"^\s*{key}: \[(.*)\]\s*$", text, re.MULTILINE)
    ]


def _hooks() -> list[str]:
    return re.split(r"^\s*- id: ", CONFIG, flags=re.MULTILINE)[1:]


def test_install_sets_up_every_stage_a_hook_runs_in():
    # Plain `pre-commit install` installs only the pre-commit hook unless the
    # config says otherwise: the push-stage lint session never ran.
    (installed,) = _list("default_install_hook_types", CONFIG)
    stages = {stage for hook in _hooks() for stages in _list("stages", hook) for stage in stages}
    assert "pre-push" in stages
    assert stages <= set(installed), f"stages {stages - set(installed)} are never installed"


def test_hooks_need_nothing_a_nox_session_makes():
    for hook in _hooks():
        (entry,) = re.findall(r"^\s*entry: (.*)$", hook, re.MULTILINE)
        assert ".nox/" not in entry, f"{entry!r} exists only after a nox session"


def test_hook_tools_are_the_versions_the_lint_session_allows():
    lint = {
        re.split(r"[<>=!~]", line)[0]: line
        for line in (ROOT / "ci/requirements-lint.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    pinned = [dep for hook in _hooks() for deps in _list("additional_dependencies", hook) for dep in deps]
    assert pinned, "the file-level hooks bring their own tools"
    for dep in pinned:
        name = re.split(r"[<>=!~]", dep)[0]
        assert lint.get(name) == dep, f"{dep!r}: ci/requirements-lint.txt says {lint.get(name)!r}"
