"""What every benchmark section shares: the run's settings, the Skip signal,
row and table helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ..timing import Samples

ALPHA, BETA = 2.0, 1.0

# The first lines of the probes that compare an op with the copy limit (rows,
# maps, gated activations): their arguments (repetitions, the cases as JSON,
# whether to compile) and the timing helpers they share. Each times every
# implementation as the limit times itself, a sample the best of
# stream_lib.BEST_OF runs (interleaved's best_of), so an op's fraction of the
# limit compares like with like.
PROBE_HEAD = """\
import json, sys, time
import torch, tierkit_torch
from tierkit.bench import stream_lib
from tierkit.bench.settle import case_wanted
from tierkit.bench.timing import in_cache_seconds_per_unit, inner_for, interleaved, paired_ratio, roof_fields
reps, cases, with_compile = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"
only = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None  # the cases measured again (settle.py)
wanted = lambda **key: case_wanted(only, key)
"""


class Skip(Exception):
    """This section cannot run here; the message says why."""


@dataclass
class Config:
    quick: bool
    out_dir: str
    log: Callable[[str], None] = print
    cold_builds: bool = False  # --cold-builds: time the torch tiers' cold builds (minutes)
    repeat: int = 1  # a section measured again (settle.py): this many times the repetitions
    # A section measured again in some of its cases (settle.py): their CASE_FIELDS values.
    only: list[dict] | None = None

    @property
    def reps(self) -> int:
        return (3 if self.quick else 7) * self.repeat


def need(module: str):
    try:
        return __import__(module)
    except ImportError as exc:
        raise Skip(f"{module} is not installed") from exc


def row(section: str, s: Samples, **fields) -> dict:
    return {"section": section, **fields, "median_s": s.median, "min_s": s.min, "max_s": s.max}


def thp_probe_rows(section: str, probe: str, args: list[str], what: str, timeout: int = 1800) -> list[dict]:
    """Run `probe` (a Python program printing its rows as JSON on its last
    line) in a subprocess with THP_MEM_ALLOC_ENABLE=1, which torch reads at
    start-up: eager's and torch.compile's large outputs then get huge pages,
    as the tierkit ops' do. A row's "seconds" (the samples) become its
    median, min and max; a failure is a Skip naming `what`."""
    proc = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "THP_MEM_ALLOC_ENABLE": "1"},
    )
    if proc.returncode != 0:
        raise Skip(f"the {what} subprocess failed: {proc.stderr[-400:]}")
    rows = []
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        if "seconds" in r:
            s = sorted(r.pop("seconds"))
            r.update(median_s=s[len(s) // 2], min_s=s[0], max_s=s[-1])
        rows.append({"section": section, **r})
    return rows


def gbs(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9


def timed_rows(results: dict, section: str) -> list[dict]:
    """The rows of `section` that carry timings."""
    return [r for r in results["sections"].get(section, {}).get("rows", []) if "median_s" in r]


def skipped_lines(results: dict, section: str, key: str) -> list[str]:
    """A line per row of `section` that was skipped: its `key`, and why."""
    rows = results["sections"].get(section, {}).get("rows", [])
    return [f"{r[key]}: skipped ({r['skipped']})." for r in rows if "skipped" in r]


def pick(rows, **match):
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def target(name, threshold, measured, met, detail=""):
    return {"target": name, "threshold": threshold, "measured": measured, "met": met, "detail": detail}


def in_case(targets: list[dict], case: dict) -> list[dict]:
    """`targets` tagged with the case whose rows they are made of (a
    section's CASE_FIELDS values), so that settle.py can measure that case
    again alone."""
    return [{**t, "case": case} for t in targets]


def per_call_target(name: str, goal: float, ours: dict, theirs: dict) -> dict:
    """`name`: ours' median time a call <= goal x theirs' (both medians from one interleaved run)."""
    ratio = ours["median_s"] / theirs["median_s"]
    detail = f"{ours['median_s'] * 1e6:.2f} us vs {theirs['median_s'] * 1e6:.2f} us"
    return target(name, goal, round(ratio, 2), ratio <= goal, detail)


def not_measured(name, threshold, why):
    return {"target": name, "threshold": threshold, "measured": None, "met": None, "detail": why}


def fmt_s(s: float) -> str:
    if s >= 1e-1:
        return f"{s:.3f} s"
    if s >= 1e-4:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def timed(r: dict) -> str:
    return f"{fmt_s(r['median_s'])} ({fmt_s(r['min_s'])}–{fmt_s(r['max_s'])})"


# One colour per implementation in every plot (the kernels, dispatch,
# boundary plots): the same name is always drawn the same way.
_PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
]  # fmt: skip
_FIXED = {
    "bridge": 0, "bridge out=": 1, "torch op": 2, "torch op out=": 3, "torch add_out": 4, "numpy": 5,
    "numpy out=": 6, "torch eager": 7, "torch eager out=": 8, "torch.compile": 9, "torch add out=": 10,
    "torch eager (THP)": 7, "torch.compile (THP)": 9,
}  # fmt: skip


def color_of(impl: str) -> str:
    """The colour of `impl` wherever it is drawn (every compiled STREAM limit grey)."""
    if impl.startswith("STREAM"):
        return "#555555"
    if impl in _FIXED:
        return _PALETTE[_FIXED[impl]]
    return _PALETTE[11 + sum(map(ord, impl)) % (len(_PALETTE) - 11)]
