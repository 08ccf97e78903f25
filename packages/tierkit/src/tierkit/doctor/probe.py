"""Running things without trusting them: commands and Python snippets in a
subprocess, so a crash or hang is a finding, not the end of the doctor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run(cmd: list[str], timeout: float = 60, env: dict | None = None, cwd: str | None = None) -> Result:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except FileNotFoundError as exc:
        return Result(127, "", str(exc))
    except subprocess.TimeoutExpired:
        return Result(124, "", f"timed out after {timeout:.0f}s")
    return Result(proc.returncode, proc.stdout, proc.stderr)


def which(name: str) -> str | None:
    return shutil.which(name)


def python_json(code: str, timeout: float = 120) -> tuple[dict | None, Result]:
    """Run `code` in a fresh interpreter; it must print one JSON object last."""
    result = run([sys.executable, "-c", code], timeout=timeout, env=dict(os.environ))
    if not result.ok:
        return None, result
    try:
        return json.loads(result.stdout.strip().splitlines()[-1]), result
    except (ValueError, IndexError):
        return None, result


def tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])
