"""The roof of the sections that measure an op against the copy limit: its
report columns and its target."""

from __future__ import annotations

from ._common import target

# The roof (the performance issue's "roofline"): the lower of the copy
# limit and the op's own in-cache speed on every thread
# (timing.in_cache_seconds_per_unit). "compute (0.62)": its arithmetic allows
# 0.62 of the copy limit, so that is its roof.
ROOF_COLUMNS = ["roof", "of the roof"]


def roof_cells(r: dict) -> list[str]:
    if "of_roof" not in r:
        return ["", ""]
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
    return target(
        f"{name} >= {floor} x its roof (the copy limit, or its in-cache speed where lower), {where}",
        floor,
        frac,
        frac >= floor,
        detail,
    )
