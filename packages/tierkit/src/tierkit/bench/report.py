"""results.json, report.md and the PNG plots: the header and the targets
table, then each section's own tables and plots (sections/<name>.py)."""

from __future__ import annotations

import json
import os

from .sections import SECTIONS
from .sections._common import table


def markdown(results: dict) -> str:
    m = results["machine"]
    out = [
        f"# tierkit benchmark report ({m['date']})",
        "",
        f"{m['cpu']}, {m['cores']} cores; Python {m['python']}, torch {m.get('torch')}, numpy {m.get('numpy')}, "
        f"torch threads {m.get('torch_threads')}. Mode: {'quick' if results['quick'] else 'full'}. "
        "Every figure is the median of repetitions (min–max in brackets); figures compared with each other "
        "were measured interleaved in the same repetitions. A figure within 5 % of its threshold was measured "
        "again with twice the repetitions until two runs agreed (settled) or three did not (unsettled).",
        "",
        "## Targets",
        "",
        table(
            ["target", "threshold", "measured", "met", "detail"],
            [
                [
                    t["target"],
                    t["threshold"],
                    "—" if t["measured"] is None else t["measured"],
                    "**measurement error**"
                    if t.get("error")
                    else ("not measured" if t["met"] is None else ("yes" if t["met"] else "**no**"))
                    + (" (**unsettled**)" if t.get("settled") is False else ""),
                    t["detail"],
                ]
                for t in results["targets"]
            ],
        ),
    ]
    for number, (name, section) in enumerate(SECTIONS.items(), 1):
        out += ["", f"## {number}. {section.TITLE}", ""]
        if name not in results["sections"]:  # results of a bench older than the section
            out += ["Not measured: these results come from a run before this section existed.", ""]
            continue
        why = results["sections"][name].get("skipped")
        if why:
            out += [f"Skipped: {why}.", ""]
        out += section.markdown(results)
    out += ["", "Plots: `kernels_gbs.png`, `boundary.png`, `dispatch.png`.", ""]
    return "\n".join(out)


def plots(results: dict, out_dir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []

    def save(fig, name: str) -> str:
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=110)
        return path

    made = []
    for section in SECTIONS.values():
        if hasattr(section, "plots"):
            made += section.plots(results, out_dir, plt, save)
    return made


def write(results: dict, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "results.json"), os.path.join(out_dir, "report.md")]
    with open(paths[0], "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(paths[1], "w") as f:
        f.write(markdown(results))
    return paths + plots(results, out_dir)
