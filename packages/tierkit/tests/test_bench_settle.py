"""The bench's settle rule (tierkit.bench.settle): a figure within 5 % of its
threshold is measured again until two runs agree or three do not. Fake
sections whose figures are scripted: only the rule's arithmetic and
bookkeeping, no timing."""

from __future__ import annotations

import pytest
from tierkit.bench import settle
from tierkit.bench import status as bench_status


class FakeSection:
    """A section with one target per name, figure = the scripted value of
    the current measurement (the section's rows hold its run number)."""

    def __init__(self, name: str, figures: dict[str, list[float]], threshold: float = 0.8):
        self.name, self.figures, self.threshold = name, figures, threshold

    def targets(self, results: dict) -> list[dict]:
        run = results["sections"][self.name]["rows"][0]["run"]
        out = []
        for target, values in self.figures.items():
            m = values[min(run, len(values)) - 1]
            out.append(
                {
                    "target": target,
                    "threshold": self.threshold,
                    "measured": m,
                    "met": m >= self.threshold,
                    "detail": "",
                }
            )
        return out


def _run(sections: dict[str, FakeSection], budget_s: float = 1e9, clock=None):
    results = {"sections": {name: {"rows": [{"run": 1}]} for name in sections}}

    def evaluate(r):
        return [t for s in sections.values() for t in s.targets(r)]

    calls = []

    def remeasure(name, run):
        calls.append((name, run))
        return {"rows": [{"run": run}]}

    results["targets"] = evaluate(results)
    kwargs = {"clock": clock} if clock else {}
    settle.settle(results, sections, remeasure, evaluate, lambda msg: None, budget_s=budget_s, **kwargs)
    return {t["target"]: t for t in results["targets"]}, calls


def test_near_is_within_five_percent_of_a_numeric_threshold_either_side():
    t = {"threshold": 0.8, "met": True}
    assert settle.near({**t, "measured": 0.84}) and settle.near({**t, "measured": 0.76})
    assert not settle.near({**t, "measured": 0.85}) and not settle.near({**t, "measured": 0.75})
    assert not settle.near({**t, "measured": None}) and not settle.near({**t, "measured": 0.8, "met": None})
    assert not settle.near({**t, "measured": 0.8, "error": True}) and not settle.near({**t, "threshold": 0})


def test_a_count_against_a_count_is_exact_not_near():
    # "stock and patched each compiled >= 1 graph": 1 of 1 is met, and measuring it again changes nothing.
    assert not settle.near({"threshold": 1, "measured": 1, "met": True})
    assert not settle.near({"threshold": 20, "measured": 19, "met": False})
    # A ratio that happens to equal an integer threshold is still a timing.
    assert settle.near({"threshold": 1, "measured": 1.0, "met": True})
    assert settle.near({"threshold": 1.0, "measured": 1, "met": True})


def test_far_figures_are_not_measured_again():
    targets, calls = _run({"rows": FakeSection("rows", {"a": [0.95], "b": [0.5]})})
    assert calls == [] and "runs" not in targets["a"] and "settled" not in targets["b"]


def test_a_near_figure_that_agrees_on_its_second_run_is_settled():
    targets, calls = _run({"rows": FakeSection("rows", {"a": [0.81, 0.83], "far": [0.99, 0.5]})})
    assert calls == [("rows", 2)]
    a = targets["a"]
    assert a["runs"] == [0.81, 0.83] and a["verdicts"] == [True, True] and a["settled"] is True
    assert a["met"] is True and "measured 2 times (0.81, 0.83), settled" in a["detail"]
    # The far target takes the last measurement's figure (the rows the report keeps), with no history.
    assert targets["far"]["measured"] == 0.5 and "runs" not in targets["far"]


def test_a_flip_is_measured_a_third_time_and_settles_on_two_agreeing():
    targets, calls = _run({"rows": FakeSection("rows", {"a": [0.81, 0.78, 0.77]})})
    assert calls == [("rows", 2), ("rows", 3)]
    assert targets["a"]["runs"] == [0.81, 0.78, 0.77] and targets["a"]["settled"] is True
    assert targets["a"]["met"] is False  # the verdict the last two runs agree on


def test_three_runs_that_keep_flipping_are_unsettled_and_say_so():
    targets, _ = _run({"rows": FakeSection("rows", {"a": [0.81, 0.78, 0.82]})})
    a = targets["a"]
    assert a["settled"] is False and a["verdicts"] == [True, False, True]
    assert "verdicts differ: unsettled" in a["detail"]
    assert bench_status(a) == "met, UNSETTLED"  # the CLI's line for it


def test_only_the_sections_with_near_targets_are_measured_again():
    sections = {
        "rows": FakeSection("rows", {"r": [0.79, 0.78]}),
        "maps": FakeSection("maps", {"m": [0.95, 0.95]}),
    }
    targets, calls = _run(sections)
    assert calls == [("rows", 2)] and targets["r"]["settled"] is True


def test_a_spent_budget_leaves_the_rest_unsettled_with_one_figure():
    ticks = iter([0.0, 0.0, 10.0, 10.0, 10.0, 10.0])
    sections = {
        "rows": FakeSection("rows", {"r": [0.79, 0.78]}),
        "maps": FakeSection("maps", {"m": [0.81, 0.82]}),
    }
    targets, calls = _run(sections, budget_s=5.0, clock=lambda: next(ticks))
    assert calls == [("rows", 2)]
    assert targets["r"]["settled"] is True
    assert targets["m"]["settled"] is False and targets["m"]["runs"] == [0.81]
    assert "not measured again (the settle budget was spent)" in targets["m"]["detail"]


@pytest.mark.parametrize("seconds", ["0", "12.5"])
def test_the_budget_comes_from_the_environment(monkeypatch, seconds):
    monkeypatch.setenv("TIERKIT_BENCH_SETTLE_SECONDS", seconds)
    assert settle.budget_seconds() == float(seconds)


def test_the_quickest_sections_are_measured_again_first():
    sections = {
        "models": FakeSection("models", {"m": [0.81, 0.82]}),
        "rows": FakeSection("rows", {"r": [0.79, 0.78]}),
    }
    results = {
        "sections": {
            "models": {"rows": [{"run": 1}], "seconds": 113.0},
            "rows": {"rows": [{"run": 1}], "seconds": 75.3},
        }
    }
    calls = []

    def remeasure(name, run):
        calls.append(name)
        return {"rows": [{"run": run}], "seconds": 1.0}

    def evaluate(r):
        return [t for s in sections.values() for t in s.targets(r)]

    results["targets"] = evaluate(results)
    settle.settle(results, sections, remeasure, evaluate, lambda msg: None, budget_s=1e9)
    assert calls == ["rows", "models"]


def test_a_stored_runs_settle_record_survives_evaluating_its_targets_again():
    """Re-rendering a stored run (the committed example) evaluates its targets
    by today's code from its rows: a target the run measured again keeps its
    runs and note where the figure is the same, and only there."""

    def t(name, measured, detail, runs=None):
        out = {"target": name, "measured": measured, "met": measured >= 0.9, "detail": detail}
        if runs:
            out.update(runs=runs, verdicts=[m >= 0.9 for m in runs], settled=True)
        return out

    recorded = [
        t("a", 0.91, "x; within 5%: settled", [0.91, 0.91]),
        t("b", 1.2, "y"),
        t("c", 0.5, "z", [0.5, 0.5]),
    ]
    evaluated = [t("a", 0.91, "x"), t("b", 1.2, "y"), t("c", 0.6, "z2"), t("d", 1.0, "")]
    out = settle.keep_settle_record(recorded, evaluated)
    assert out[0] == recorded[0]  # the run's record, note included
    assert (
        out[1:] == evaluated[1:]
    )  # no record, another figure (today's code measures otherwise), a new target
