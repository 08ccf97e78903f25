"""One line per check: status, value, and for warn/fail the fix."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass
class Check:
    name: str
    status: Status
    value: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status.value:>4}] {self.name}: {self.value}"
        return f"{text}\n       fix: {self.fix}" if self.fix and self.status != Status.OK else text


def ok(name: str, value: str) -> Check:
    return Check(name, Status.OK, value)


def warn(name: str, value: str, fix: str) -> Check:
    return Check(name, Status.WARN, value, fix)


def fail(name: str, value: str, fix: str) -> Check:
    return Check(name, Status.FAIL, value, fix)


def render_text(checks: list[Check]) -> str:
    lines = [c.line() for c in checks]
    counts = {s: sum(c.status == s for c in checks) for s in Status}
    lines.append(f"{counts[Status.OK]} ok, {counts[Status.WARN]} warn, {counts[Status.FAIL]} fail")
    return "\n".join(lines)


def render_json(checks: list[Check]) -> str:
    return json.dumps([{**asdict(c), "status": c.status.value} for c in checks], indent=2)


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == Status.FAIL for c in checks) else 0
