"""What the sections that measure ops against the compiled copy limit share
(rows, maps, gated activations): running a probe over a kind's entries, the
report table, the roof's columns and its target."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..timing import ROOF_TRIES
from ._common import Config, Skip, need, table, target, thp_probe_rows, timed


def measure_entries(
    cfg: Config, section: str, probe: str, what: str, entries: Sequence, cases: list
) -> list[dict]:
    """`probe` over every entry of one kind of the op table, in one process
    with THP on; a Skip naming the entries this tierkit_torch lacks."""
    torch = need("torch")
    need("tierkit_torch")
    missing = [e.name for e in entries if not hasattr(torch.ops.tierkit, e.name)]
    if missing:
        raise Skip(f"this tierkit_torch has no {', '.join(missing)}")
    # --quick: no torch.compile peers (~10 s a graph; --quick measures no target's shape)
    args = [str(cfg.reps), json.dumps(cases), "0" if cfg.quick else "1"]
    if cfg.only is not None:
        args.append(json.dumps(cfg.only))
    return thp_probe_rows(section, probe, args, what, timeout=3600)


def limit_table(
    rows: list[dict], shape: tuple[str, Callable[[dict], str]], moved: str, unpaired: tuple[str, ...]
) -> str:
    """The section's table: per row its shape (`shape`: header, cell), time,
    GB/s over `moved`, the paired speed-up (none for the `unpaired` impls, the
    tierkit ops themselves), its fraction of the copy limit and of its roof."""
    header, cell = shape
    return table(
        [
            "op",
            "impl",
            header,
            "dtype",
            "time",
            f"GB/s ({moved})",
            "tierkit's speed-up over it",
            "of the copy limit",
        ]
        + ROOF_COLUMNS,
        [
            [
                r["op"],
                r["impl"],
                cell(r),
                r["dtype"],
                timed(r),
                f"{r['gbs']:.1f}",
                "—"
                if "ours_over_theirs" not in r or r["impl"] in unpaired
                else f"{r['ours_over_theirs']:.2f}x",
                f"{r['of_limit']:.2f}" if "of_limit" in r else "",
                *roof_cells(r),
            ]
            for r in rows
        ],
    )


# The roof (the performance issue's "roofline"): the lower of the copy
# limit and the op's own in-cache speed on every thread
# (timing.in_cache_seconds_per_unit). "compute (0.62)": its arithmetic allows
# 0.62 of the copy limit, so that is its roof.
ROOF_COLUMNS = ["roof", "of the roof"]


def roof_cells(r: dict) -> list[str]:
    if "of_roof" not in r:
        return ["", ""]
    if r.get("roof_error"):  # the op beat its in-cache figure: judged against the copy limit
        return ["memory (in-cache figure beaten)", f"{r['of_limit']:.2f}"]
    roof = "memory" if r["roof"] == "memory" else f"compute ({r['roof_of_limit']:.2f})"
    return [roof, f"{r['of_roof']:.2f}"]


def roof_target(name: str, floor: float, r: dict, where: str) -> dict:
    """`name` >= floor x its roof (of_roof; the copy limit where no roof was measured), at `where`."""
    frac = round(r.get("of_roof", r["of_limit"]), 2)
    roof = r.get("roof", "memory")
    detail = (
        ""
        if roof == "memory"
        else f"compute-bound: its in-cache speed is {r['roof_of_limit']:.2f} of the copy limit"
    )
    if r.get("roof_error"):
        # Faster at full size than its in-cache figure allows, after ROOF_TRIES: that figure is no
        # roof, so the op is judged against the copy limit (never above its roof, never flattered).
        frac = round(r["of_limit"], 2)
        detail = (
            f"its in-cache figure is no roof: the op ran {r['of_roof']:.2f} x it at full size "
            f"(measured {ROOF_TRIES} times), so it is judged against the copy limit"
        )
    return target(
        f"{name} >= {floor} x its roof (the copy limit, or its in-cache speed where lower), {where}",
        floor,
        frac,
        frac >= floor,
        detail,
    )
