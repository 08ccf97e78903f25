"""The performance targets, evaluated from the rows of one run: each
section states its own (sections/<name>.py, ``targets``)."""

from __future__ import annotations

from .sections import SECTIONS


def evaluate(results: dict) -> list[dict]:
    return [t for section in SECTIONS.values() for t in section.targets(results)]
