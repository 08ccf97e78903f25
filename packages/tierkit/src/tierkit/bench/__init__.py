"""``tierkit bench``: what each tier does and what each boundary costs,
measured against the machine's own memory bandwidth and the tools a user
would pick instead. Writes results.json, report.md and PNG plots."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from . import machine, report, settle, targets
from .sections import SECTIONS, Config, Skip


def run(quick: bool, out_dir: str, log=None, cold_builds: bool = False) -> dict:
    log = log or (lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
    cfg = Config(quick=quick, out_dir=out_dir, log=log, cold_builds=cold_builds)
    results: dict[str, Any] = {"quick": quick, "machine": machine.info(), "sections": {}}
    for i, name in enumerate(SECTIONS, 1):
        log(f"({i}/{len(SECTIONS)}) {name} ...")
        results["sections"][name] = _measure(name, cfg)
    results["targets"] = targets.evaluate(results)
    if not quick:  # --quick measures no target's own shape: nothing to settle

        def remeasure(name: str, run: int, cases: list[dict] | None) -> dict:
            return _measure(name, dataclasses.replace(cfg, repeat=settle.REPEAT, only=cases))

        settle.settle(results, SECTIONS, remeasure, targets.evaluate, log)
    return results


def _measure(name: str, cfg: Config) -> dict:
    t0 = time.perf_counter()
    try:
        entry = {"rows": SECTIONS[name].measure(cfg), "skipped": None}
    except Skip as why:
        entry = {"rows": [], "skipped": str(why)}
        cfg.log(f"    skipped: {why}")
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    cfg.log(f"    done in {entry['seconds']} s")
    return entry


def main(args) -> int:
    results = run(args.quick, args.out, cold_builds=getattr(args, "cold_builds", False))
    paths = report.write(results, args.out)
    print("\n".join(["wrote:", *paths]))
    for t in results["targets"]:
        print(f"  [{status(t)}] {t['target']}: {t['measured']}")
    errors = [t for t in results["targets"] if t.get("error")]
    for t in errors:
        print(f"bench: measurement error: {t['target']}: {t['detail']}", file=sys.stderr)
    # A figure above its limit is not a result: the session fails.
    return 1 if errors else 0


def status(t: dict) -> str:
    """A target's verdict: a figure above its limit is an error, never met."""
    if t.get("error"):
        return "MEASUREMENT ERROR"
    verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
    return f"{verdict}, UNSETTLED" if t.get("settled") is False else verdict
