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

    def remeasure(name, run, cases):
        assert cases is None  # these fake sections name no cases
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

    def remeasure(name, run, cases):
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


class CaseSection:
    """A section of two fields per case (op, dtype), one target per case:
    its figure is the case's row's "figure", which each measurement sets
    from a script per case and run."""

    CASE_FIELDS = ("op", "dtype")

    def __init__(self, name: str, script: dict[tuple[str, str], list[float]]):
        self.name, self.script = name, script

    def rows(self, run: int, only: list[dict] | None) -> list[dict]:
        out = []
        for (op, dtype), figures in self.script.items():
            if only is None or {"op": op, "dtype": dtype} in only:
                for impl in ("mine", "peer"):
                    out.append(
                        {"op": op, "dtype": dtype, "impl": impl, "run": run, "figure": figures[run - 1]}
                    )
        return out

    def targets(self, results: dict) -> list[dict]:
        out = []
        for r in results["sections"][self.name]["rows"]:
            if r["impl"] == "mine":
                m = r["figure"]
                t = {"target": f"{r['op']} {r['dtype']}", "threshold": 0.8, "measured": m, "met": m >= 0.8}
                out.append({**t, "detail": "", "case": {"op": r["op"], "dtype": r["dtype"]}})
        return out


def _run_cases(section: CaseSection, seconds: float, budget_s: float = 1e9):
    results = {"sections": {section.name: {"rows": section.rows(1, None), "seconds": seconds}}}
    calls = []

    def remeasure(name, run, cases):
        calls.append((name, run, cases))
        return {"rows": section.rows(run, cases), "seconds": 1.0, "skipped": None}

    def evaluate(r):
        return section.targets(r)

    results["targets"] = evaluate(results)
    logged = []
    settle.settle(results, {section.name: section}, remeasure, evaluate, logged.append, budget_s=budget_s)
    return results, calls, logged


def test_a_section_that_names_its_cases_is_measured_again_in_its_near_cases_only():
    section = CaseSection(
        "rows",
        {("rms", "float32"): [0.95, 0.5], ("rms", "bf16"): [0.79, 0.81, 0.82], ("ln", "bf16"): [0.5, 0.9]},
    )
    results, calls, _ = _run_cases(section, seconds=30.0)
    assert calls == [
        ("rows", 2, [{"op": "rms", "dtype": "bf16"}]),
        ("rows", 3, [{"op": "rms", "dtype": "bf16"}]),
    ]
    targets = {t["target"]: t for t in results["targets"]}
    assert targets["rms bf16"]["runs"] == [0.79, 0.81, 0.82] and targets["rms bf16"]["settled"] is True
    # The far cases keep their first rows (in their first places), not the script's later figures.
    rows = results["sections"]["rows"]["rows"]
    assert [(r["op"], r["dtype"], r["run"]) for r in rows] == [
        ("rms", "float32", 1), ("rms", "float32", 1), ("rms", "bf16", 3), ("rms", "bf16", 3), ("ln", "bf16", 1),
        ("ln", "bf16", 1),
    ]  # fmt: skip
    assert targets["rms float32"]["measured"] == 0.95 and targets["ln bf16"]["measured"] == 0.5
    # The section's seconds stay its first measurement's; each measurement again is recorded.
    entry = results["sections"]["rows"]
    assert entry["seconds"] == 30.0 and [m["run"] for m in entry["remeasured"]] == [2, 3]


def test_a_measurement_again_that_would_overrun_the_budget_is_passed_over():
    # Two near cases of three: expected 90 s x 2 repetitions x 2/3 = 120 s.
    section = CaseSection(
        "rows", {("a", "f"): [0.79, 0.79], ("b", "f"): [0.81, 0.81], ("c", "f"): [0.5, 0.5]}
    )
    _, calls, logged = _run_cases(section, seconds=90.0, budget_s=119.0)
    assert calls == [] and "takes ~120 s, 119 s of the 119 s budget left" in logged[0]
    _, calls, _ = _run_cases(section, seconds=90.0, budget_s=121.0)
    assert calls == [("rows", 2, [{"op": "a", "dtype": "f"}, {"op": "b", "dtype": "f"}])]


def test_merge_rows_replaces_the_measured_cases_in_place_and_keeps_a_case_that_came_back_empty():
    old = [{"op": "a", "v": 1}, {"op": "b", "v": 1}, {"op": "a", "v": 2}, {"op": "c", "v": 1}, {"note": "x"}]
    new = [{"op": "a", "v": 10}, {"op": "a", "v": 20}, {"op": "b", "v": 99}]
    got = settle.merge_rows(old, new, [{"op": "a"}, {"op": "c"}], ("op",))
    # b was not asked for: its old row stays though the new run had one; c came back empty: kept.
    assert got == [
        {"op": "a", "v": 10},
        {"op": "a", "v": 20},
        {"op": "b", "v": 1},
        {"op": "c", "v": 1},
        {"note": "x"},
    ]


def test_a_case_is_wanted_by_any_of_its_fields_given():
    only = [{"model": "llama", "cell": "decode", "how": "compiled", "dtype": "bfloat16"}]
    assert settle.case_wanted(None, {"model": "qwen3"})
    assert settle.case_wanted(only, {"model": "llama", "dtype": "bfloat16"})  # before the model is built
    assert not settle.case_wanted(only, {"model": "llama", "dtype": "float32"})
    assert not settle.case_wanted(
        only, {"model": "llama", "cell": "decode", "how": "eager", "dtype": "bfloat16"}
    )


def test_the_expected_time_of_some_cases_counts_their_own_seconds_and_the_section_outside_them():
    section = CaseSection("rows", {})
    rows = [
        {"op": "a", "dtype": "f", "case_seconds": 30.0},
        {"op": "a", "dtype": "f", "case_seconds": 30.0},  # a case's rows share its seconds
        {"op": "b", "dtype": "f", "case_seconds": 5.0},
    ]
    entry = {"rows": rows, "seconds": 45.0}  # 10 s outside the cases (the probe's start)
    assert settle._expected_seconds(entry, section, [{"op": "b", "dtype": "f"}]) == 10.0 + 2 * 5.0
    assert settle._expected_seconds(entry, section, [{"op": "a", "dtype": "f"}]) == 10.0 + 2 * 30.0
    assert settle._expected_seconds(entry, section, None) == 2 * 45.0
    # Rows without their seconds: the cases' share.
    plain = {"rows": [{k: v for k, v in r.items() if k != "case_seconds"} for r in rows], "seconds": 45.0}
    assert settle._expected_seconds(plain, section, [{"op": "b", "dtype": "f"}]) == 2 * 45.0 / 2


def test_the_sections_with_the_fewest_seconds_a_near_target_go_first():
    # silu: 80 s for one near target; rows: 100 s for four. Within 300 s (x2 repetitions), rows
    # goes first and silu no longer fits.
    sections = {
        "silu": FakeSection("silu", {"s": [0.81, 0.82]}),
        "rows": FakeSection("rows", {f"r{i}": [0.79, 0.78] for i in range(4)}),
    }
    results = {
        "sections": {
            "silu": {"rows": [{"run": 1}], "seconds": 80.0},
            "rows": {"rows": [{"run": 1}], "seconds": 100.0},
        }
    }
    calls, now = [], [0.0]

    def remeasure(name, run, cases):
        calls.append(name)
        now[0] += 2 * results["sections"][name]["seconds"]
        return {"rows": [{"run": run}], "seconds": 1.0}

    def evaluate(r):
        return [t for s in sections.values() for t in s.targets(r)]

    results["targets"] = evaluate(results)
    settle.settle(
        results, sections, remeasure, evaluate, lambda msg: None, budget_s=300, clock=lambda: now[0]
    )
    assert calls == ["rows"]
