"""Verdicts you can trust: a target whose figure lies within 5 % of its
threshold is measured again before the report calls it met or missed.

Three consecutive runs once changed the verdict of 17 targets in 191, each a
figure a few percent from its threshold or taken in a bandwidth dip. So after
the first pass, each section with such a target is measured again, with
twice the repetitions (its figures stay paired: every section times what it
compares side by side), and its targets are evaluated again over the new
rows. A target is *settled* once two consecutive measurements give it the
same verdict; one still flipping after ``MAX_RUNS`` measurements is reported
*unsettled*, with every figure it had. The report keeps the last
measurement's rows and verdicts.

A section that names its cases (``CASE_FIELDS``: the row fields one
measurement shares, such as op, shape and dtype, and each target's ``case``)
is measured again in its near targets' cases only; the rest of its rows stay
as they were. The rows section once took 280 s to measure again for 18 near
targets in 8 of its 24 cases.

Re-measuring stays within a budget (``TIERKIT_BENCH_SETTLE_SECONDS``, 300 s
by default): a section is measured again only where its expected time fits
in what is left (``_expected_seconds``: twice its first measurement's
seconds; for some cases, its time outside its cases plus twice those cases'
own recorded seconds), those with the fewest seconds a near target first;
a section that does not fit is passed over for the ones that do. What it did not reach is reported unsettled,
saying so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

BAND = 0.05  # within 5 % of the threshold: measured again
MAX_RUNS = 3  # the first measurement and up to two more
REPEAT = 2  # a section measured again: this many times its repetitions


def case_of(row: dict, fields: tuple[str, ...]) -> dict | None:
    """The case a row belongs to (its values of `fields`), None where it lacks one."""
    if not all(f in row for f in fields):
        return None
    return {f: row[f] for f in fields}


def case_wanted(only: list[dict] | None, key: dict) -> bool:
    """Whether a measurement of `key` (some or all of a section's case fields:
    a probe asks before building what a case needs) belongs to one of the
    cases in `only`; every case is wanted where `only` is None."""
    if only is None:
        return True
    return any(all(c[k] == v for k, v in key.items() if k in c) for c in only)


def merge_rows(old: list[dict], new: list[dict], only: list[dict], fields: tuple[str, ...]) -> list[dict]:
    """`old` with the rows of the cases in `only` replaced by `new`'s, in
    place of the first old row of each case (so the report's tables keep
    their order); a case `new` lacks keeps its old rows."""

    def key(row):
        c = case_of(row, fields)
        return None if c is None else tuple(c[f] for f in fields)

    wanted = {tuple(c[f] for f in fields) for c in only}
    fresh: dict[tuple, list[dict]] = {}
    for r in new:
        if key(r) in wanted:
            fresh.setdefault(key(r), []).append(r)
    out, placed = [], set()
    for r in old:
        k = key(r)
        if k in fresh:
            if k not in placed:
                out.extend(fresh[k])
                placed.add(k)
            continue
        out.append(r)
    for k, rows in fresh.items():  # a case the old rows did not have
        if k not in placed:
            out.extend(rows)
    return out


def near(t: dict) -> bool:
    """A met/missed figure within BAND of its numeric, nonzero threshold.

    A count against a count (graphs compiled, recompiles: ints both) is
    exact, not a timing: measuring it again cannot change it, and a count of
    1 against a threshold of 1 is met, not "near"."""
    m, th = t.get("measured"), t.get("threshold")
    if t.get("met") is None or t.get("error") or isinstance(m, bool) or isinstance(th, bool):
        return False
    if not isinstance(m, (int, float)) or not isinstance(th, (int, float)) or th == 0:
        return False
    if isinstance(m, int) and isinstance(th, int):
        return False
    return abs(m / th - 1) <= BAND + 1e-9  # 0.76 against 0.8 is 5 %, not 5.000000000000004


def budget_seconds() -> float:
    return float(os.environ.get("TIERKIT_BENCH_SETTLE_SECONDS", "300"))


def settle(
    results: dict,
    sections: dict[str, Any],
    remeasure: Callable[[str, int, list[dict] | None], dict],
    evaluate: Callable[[dict], list[dict]],
    log: Callable[[str], None],
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Measures again the sections of `results` whose targets are near their
    threshold and updates `results["targets"]` in place: each near target
    gains ``runs`` (its figures, first to last), ``verdicts`` and ``settled``.

    ``remeasure(name, run, cases)`` measures section `name` again (run 2, 3:
    with ``REPEAT`` times the repetitions), in `cases` only where that is a
    list (the near targets' cases of a section with ``CASE_FIELDS``), and
    returns its results entry; ``evaluate`` gives every target of the
    results. A target whose section is not measured again keeps one figure
    and is unsettled."""
    budget = budget_seconds() if budget_s is None else budget_s
    started = clock()
    owner, case = {}, {}
    for name, s in sections.items():
        for t in s.targets(results):
            owner[t["target"]], case[t["target"]] = name, t.get("case")
    history: dict[str, list[tuple[Any, bool]]] = {
        t["target"]: [(t["measured"], t["met"])] for t in results["targets"] if near(t)
    }
    if not history:
        return
    first = {name: dict(entry) for name, entry in results["sections"].items()}  # the first measurement
    pending = set(history)  # the targets not settled yet
    latest = results["targets"]  # the last evaluation, over the last rows
    for run in range(2, MAX_RUNS + 1):
        measured: set[str] = set()
        plan = {}
        for name in sections:
            near_here = [n for n in history if n in pending and owner.get(n) == name]  # in report order
            if near_here:
                cases = _cases(sections[name], [case.get(n) for n in near_here])
                plan[name] = (
                    cases,
                    len(near_here),
                    _expected_seconds(first.get(name, {}), sections[name], cases),
                )
        # The fewest seconds a near target first: the most verdicts settled within the budget (a
        # run once spent 143 s of it on silu's one near target, leaving too little for rows' 20).
        for name in sorted(plan, key=lambda name: plan[name][2] / plan[name][1]):
            cases, count, expected = plan[name]
            left = budget - (clock() - started)
            if left <= 0 or expected > left:
                log(
                    f"settle: {name} not measured again (run {run}): it takes ~{expected:.0f} s, "
                    f"{max(left, 0):.0f} s of the {budget:.0f} s budget left"
                )
                continue
            what = "" if cases is None else f" in {len(cases)} of its cases"
            log(f"settle: measuring {name} again{what} (run {run}): {count} near")
            new = remeasure(name, run, cases)
            results["sections"][name] = _merged(results["sections"][name], new, sections[name], cases, run)
            measured.add(name)
        if not measured:
            break
        latest = evaluate(results)
        now = {t["target"]: t for t in latest}
        for n in list(pending):
            t = now.get(n)
            if owner.get(n) not in measured or t is None or t.get("met") is None:
                continue
            history[n].append((t["measured"], t["met"]))
            if history[n][-1][1] == history[n][-2][1]:
                pending.discard(n)
        if not pending:
            break
    for t in latest:
        if t["target"] not in history:
            continue
        runs = history[t["target"]]
        t["runs"] = [m for m, _ in runs]
        t["verdicts"] = [met for _, met in runs]
        t["settled"] = t["target"] not in pending
        figures = ", ".join(str(m) for m in t["runs"])
        if t["settled"]:
            note = f"within {BAND:.0%} of its threshold: measured {len(runs)} times ({figures}), settled"
        elif len(runs) == 1:
            note = f"within {BAND:.0%} of its threshold; not measured again (the settle budget was spent): unsettled"
        else:
            note = f"within {BAND:.0%} of its threshold: measured {len(runs)} times ({figures}), verdicts differ: unsettled"
        t["detail"] = f"{t['detail']}; {note}" if t.get("detail") else note
    results["targets"] = latest


def keep_settle_record(recorded: list[dict], targets: list[dict]) -> list[dict]:
    """`targets` (evaluated again from a run's rows, by today's code) with the
    run's settle record (``runs``, ``verdicts``, ``settled`` and the note in
    ``detail``) where `recorded` (the run's own targets) has one for the same
    target and figure: re-rendering a stored run keeps what it measured again."""
    by_name = {t["target"]: t for t in recorded if "runs" in t}
    out = []
    for t in targets:
        r = by_name.get(t["target"])
        if r is not None and r.get("measured") == t.get("measured"):
            t = {
                **t,
                "runs": r["runs"],
                "verdicts": r["verdicts"],
                "settled": r["settled"],
                "detail": r["detail"],
            }
        out.append(t)
    return out


def _cases(section: Any, near_cases: list[dict | None]) -> list[dict] | None:
    """The distinct cases of a section's near targets; None (the whole
    section) where the section names no cases or a near target has none."""
    if not getattr(section, "CASE_FIELDS", None) or any(c is None for c in near_cases):
        return None
    out: list[dict] = []
    for c in near_cases:
        if c is not None and c not in out:
            out.append(c)
    return out


def _expected_seconds(entry: dict, section: Any, cases: list[dict] | None) -> float:
    """A measurement again's expected time: the first one's seconds times
    REPEAT; for some cases, the section's time outside its cases (a probe's
    start, building models) plus REPEAT times the wanted cases' own seconds
    (``case_seconds``, which a probe puts on each row: a case's compiles
    make it cost more than its share), or, without those, its share of the
    cases."""
    seconds = entry.get("seconds") or 0.0
    if cases is None:
        return seconds * REPEAT
    fields = section.CASE_FIELDS
    own: dict[tuple, float] = {}
    timed = True  # every case's rows carry its seconds
    for r in entry.get("rows", []):
        c = case_of(r, fields)
        if c is not None:
            v = r.get("case_seconds")
            timed = timed and isinstance(v, (int, float))
            own[tuple(c.values())] = float(v) if isinstance(v, (int, float)) else 0.0
    wanted = [tuple(c[f] for f in fields) for c in cases]
    if own and timed:
        outside = max(0.0, seconds - sum(own.values()))
        return outside + REPEAT * sum(own.get(k, 0.0) for k in wanted)
    return seconds * REPEAT * min(1.0, len(wanted) / len(own)) if own else seconds * REPEAT


def _merged(old: dict, new: dict, section: Any, cases: list[dict] | None, run: int) -> dict:
    """The section's entry after measuring it again: the new rows (only the
    measured cases' where `cases` is a list), the first measurement's seconds,
    and each measurement again in ``remeasured``. A measurement again that
    was skipped leaves the rows as they were."""
    record = [*old.get("remeasured", []), {"run": run, "cases": cases, "seconds": new.get("seconds")}]
    if new.get("skipped"):
        return {**old, "remeasured": record}
    rows = new["rows"] if cases is None else merge_rows(old["rows"], new["rows"], cases, section.CASE_FIELDS)
    return {**new, "rows": rows, "seconds": old.get("seconds", new.get("seconds")), "remeasured": record}
