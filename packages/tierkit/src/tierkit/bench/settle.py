"""Verdicts you can trust: a target whose figure lies within 5 % of its
threshold is measured again before the report calls it met or missed.

Three consecutive runs once changed the verdict of 17 targets in 191, each a
figure a few percent from its threshold or taken in a bandwidth dip. So after
the first pass, each section with such a target is measured again, with
twice the repetitions (its figures stay paired: every section times what it
compares side by side), and its targets are evaluated again over the new
rows. A target is *settled* once two consecutive measurements give it the
same verdict; one still flipping after ``MAX_RUNS`` measurements is reported
*unsettled*, with every figure it had. Re-measuring stops when the budget
(``TIERKIT_BENCH_SETTLE_SECONDS``, 300 s by default) is spent; what it did
not reach is reported unsettled, saying so. The report keeps the last
measurement's rows and verdicts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

BAND = 0.05  # within 5 % of the threshold: measured again
MAX_RUNS = 3  # the first measurement and up to two more


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
    remeasure: Callable[[str, int], dict],
    evaluate: Callable[[dict], list[dict]],
    log: Callable[[str], None],
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Measures again the sections of `results` whose targets are near their
    threshold and updates `results["targets"]` in place: each near target
    gains ``runs`` (its figures, first to last), ``verdicts`` and ``settled``.

    ``remeasure(name, run)`` measures section `name` again (run 2, 3: with
    twice the repetitions) and returns its results entry; ``evaluate`` gives
    every target of the results. A target whose section is not measured
    again keeps one figure and is unsettled."""
    budget = budget_seconds() if budget_s is None else budget_s
    started = clock()
    owner = {t["target"]: name for name, s in sections.items() for t in s.targets(results)}
    history: dict[str, list[tuple[Any, bool]]] = {
        t["target"]: [(t["measured"], t["met"])] for t in results["targets"] if near(t)
    }
    if not history:
        return
    pending = set(history)  # the targets not settled yet
    latest = results["targets"]  # the last evaluation, over the last rows
    for run in range(2, MAX_RUNS + 1):
        measured: set[str] = set()
        todo = [name for name in sections if any(owner.get(n) == name for n in pending)]
        # The quickest sections first: the most verdicts settled within the budget.
        todo.sort(key=lambda name: results["sections"][name].get("seconds") or 0)
        for name in todo:
            if clock() - started >= budget:
                log(f"settle: budget of {budget:.0f} s spent; {name} not measured again")
                break
            log(
                f"settle: measuring {name} again (run {run}): {sum(owner.get(n) == name for n in pending)} near"
            )
            results["sections"][name] = remeasure(name, run)
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
