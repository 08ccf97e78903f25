"""``tierkit doctor explain LOG``: which layer of a build or import broke.

Reads the whole log, not just its first "error": every line is matched
against the causes in explain_rules.RULES, echoes (`ninja: build stopped`,
`error: command ... failed`, warnings) are skipped, and the highest-ranked
line wins, the earliest among equals. A cause printed after its consequence
(an ABI mismatch after `libc10.so: cannot open shared object file`) still
wins. With no rule matching, the answer is an honest "unknown" that quotes
the first line that looks like an error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

from .explain_rules import ECHOES, RULES, Rule

UNKNOWN = "unknown"
# What the "unknown" answer quotes: the first line that says it failed.
_ERRORISH = re.compile(r"error|fatal|failed|Traceback|exception|not found|cannot", re.IGNORECASE)


@dataclass
class Diagnosis:
    layer: str
    line: str
    line_number: int
    explanation: str
    fix: str

    @property
    def known(self) -> bool:
        return self.layer != UNKNOWN

    def as_dict(self) -> dict:
        return asdict(self)


def _demangle(line: str) -> str:
    symbols = re.findall(r"_Z[\w$.]+", line)
    if not symbols or not shutil.which("c++filt"):
        return ""
    out = subprocess.run(["c++filt", *symbols], capture_output=True, text=True).stdout.strip()
    return out.replace("\n", "; ")


def _applicable(text: str) -> list[Rule]:
    return [
        r
        for r in RULES
        if (not r.context or re.search(r.context, text))
        and not (r.not_context and re.search(r.not_context, text))
    ]


def explain(text: str) -> Diagnosis:
    echo = re.compile("|".join(ECHOES))
    rules = _applicable(text)
    best: tuple[int, int, Rule, re.Match, str] | None = None
    first_error: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if echo.search(line):
            continue
        if first_error is None and _ERRORISH.search(line):
            first_error = (number, line.strip())
        for rule in rules:  # the first rule that matches a line names it
            match = re.search(rule.pattern, line)
            if match:
                if best is None or rule.rank > best[0]:
                    best = (rule.rank, number, rule, match, line)
                break
    if best is None:
        number, line = first_error or (0, "")
        return Diagnosis(
            UNKNOWN,
            line,
            number,
            "no known failure pattern matched this log",
            "start from the quoted line (the first that looks like an error); `tierkit doctor` checks the "
            "toolchain, and docs/doctor.md lists the causes explain knows",
        )
    _, number, rule, match, line = best
    explanation = rule.explanation
    if rule.layer in ("abi", "loader", "linker"):
        demangled = _demangle(line)
        if demangled:
            explanation += f" (symbol: {demangled})"
    return Diagnosis(rule.layer, line.strip(), number, explanation, rule.fix_for(match, text))


def render(d: Diagnosis) -> str:
    if not d.known:
        where = f"line {d.line_number}: {d.line}" if d.line_number else "no line looks like an error"
        return f"layer: unknown (nothing matched a known failure)\n{where}\nfix: {d.fix}"
    return f"layer: {d.layer}\nline {d.line_number}: {d.line}\nwhy: {d.explanation}\nfix: {d.fix}"
