"""results.json, report.md and the PNG plots."""

from __future__ import annotations

import json
import os


def _fmt_s(s: float) -> str:
    if s >= 1e-1:
        return f"{s:.3f} s"
    if s >= 1e-4:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


def _table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _timed(r: dict) -> str:
    return f"{_fmt_s(r['median_s'])} ({_fmt_s(r['min_s'])}–{_fmt_s(r['max_s'])})"


def markdown(results: dict) -> str:
    m = results["machine"]
    out = [
        f"# tierkit benchmark report ({m['date']})",
        "",
        f"{m['cpu']}, {m['cores']} cores; Python {m['python']}, torch {m.get('torch')}, numpy {m.get('numpy')}, "
        f"torch threads {m.get('torch_threads')}. Mode: {'quick' if results['quick'] else 'full'}. "
        "Every figure is the median of repetitions (min–max in brackets); figures compared with each other "
        "were measured interleaved in the same repetitions.",
        "",
        "## Targets",
        "",
    ]
    out.append(
        _table(
            ["target", "threshold", "measured", "met", "detail"],
            [
                [
                    t["target"],
                    t["threshold"],
                    "—" if t["measured"] is None else t["measured"],
                    "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**"),
                    t["detail"],
                ]
                for t in results["targets"]
            ],
        )
    )
    sec = results["sections"]

    def rows(name):
        return [r for r in sec.get(name, {}).get("rows", []) if "median_s" in r]

    def skipped(name):
        why = sec.get(name, {}).get("skipped")
        return [f"Skipped: {why}.", ""] if why else []

    out += [
        "",
        "## 1. The limit: STREAM bandwidth (torch loops, arrays far beyond the caches)",
        "",
    ] + skipped("stream")
    out.append(
        _table(
            ["kernel", "threads", "GB/s", "time"],
            [[r["kernel"], r["threads"], f"{r['gbs']:.1f}", _timed(r)] for r in rows("stream")],
        )
    )
    out += ["", "## 2. Kernels (float32 unless stated; GB/s = bytes the op must move / time)", ""] + skipped(
        "kernels"
    )
    out.append(
        _table(
            ["op", "n", "impl", "dtype", "time", "GB/s", "of STREAM"],
            [
                [
                    r["op"],
                    f"{r['n']:,}",
                    r["impl"],
                    r["dtype"],
                    _timed(r),
                    f"{r['gbs']:.1f}",
                    f"{r['fraction_of_stream']:.2f}" if r.get("fraction_of_stream") else "—",
                ]
                for r in rows("kernels")
            ],
        )
    )
    comp = [r for r in rows("kernels") if r.get("compile_s")]
    if comp:
        out += [
            "",
            "torch.compile compile times (excluded above): "
            + ", ".join(f"{r['op']} n={r['n']:,}: {r['compile_s']:.1f} s" for r in comp),
        ]
    speed = []
    for r in rows("kernels"):
        if r["impl"] in ("torch op", "bridge", "bridge out=", "torch add_out") and r["dtype"] == "float32":
            alts = {
                a["impl"]: a
                for a in rows("kernels")
                if a["op"] == r["op"] and a["n"] == r["n"] and a["dtype"] == "float32"
            }
            speed.append(
                [r["op"], f"{r['n']:,}", r["impl"]]
                + [
                    f"{alts[a]['median_s'] / r['median_s']:.2f}x" if a in alts else "—"
                    for a in ("numpy", "torch eager", "torch.compile")
                ]
            )
    out += [
        "",
        "Speedup of ours vs each alternative (>1 = ours faster):",
        "",
        _table(["op", "n", "ours", "vs numpy", "vs torch eager", "vs torch.compile"], speed),
    ]
    out += ["", "## 3. The boundary", ""] + skipped("boundary")
    out.append(
        _table(
            ["kind", "impl", "n", "time"],
            [[r["kind"], r["impl"], r["n"], _timed(r)] for r in rows("boundary")],
        )
    )
    out += ["", "## 4. Dispatch latency (1-element tensors)", ""] + skipped("dispatch")
    out.append(
        _table(
            ["impl", "process", "per call"], [[r["impl"], r["process"], _timed(r)] for r in rows("dispatch")]
        )
    )
    for r in sec.get("dispatch", {}).get("rows", []):
        if "skipped" in r:
            out.append(f"\n{r['impl']}: skipped ({r['skipped']}).")
    out += ["", "## 5. DLPack / buffer-protocol export of a tierkit Buffer", ""] + skipped("exports")
    out.append(
        _table(["impl", "n", "per call"], [[r["impl"], f"{r['n']:,}", _timed(r)] for r in rows("exports")])
    )
    out += [
        "",
        "## 6. GIL: Python threads calling the bridge's scale_shift(out=), kernels single-threaded",
        "",
    ] + skipped("gil")
    out.append(
        _table(
            ["threads", "wall", "aggregate GB/s", "vs 1 thread"],
            [[r["threads"], _timed(r), f"{r['gbs']:.1f}", f"{r['speedup_vs_1']:.2f}x"] for r in rows("gil")],
        )
    )
    out += ["", "## 7. Allocation: where the time of a large new output goes", ""] + skipped("allocation")
    out.append(
        _table(
            ["impl", "n", "time", "vs out="],
            [[r["impl"], f"{r['n']:,}", _timed(r), f"{r['vs_out']:.2f}x"] for r in rows("allocation")],
        )
    )
    out += ["", "## 8. GPU", ""] + skipped("gpu")
    g = [r for r in sec.get("gpu", {}).get("rows", []) if "ms" in r]
    if g:
        out.append(
            _table(
                ["op", "impl", "dtype", "n", "ms", "GB/s", "of clone"],
                [
                    [
                        r["op"],
                        r["impl"],
                        r["dtype"],
                        r["n"],
                        f"{r['ms']:.4f}",
                        f"{r['gbs']:.1f}",
                        f"{r['fraction_of_clone']:.2f}",
                    ]
                    for r in g
                ],
            )
        )
    out += ["", "Plots: `kernels_gbs.png`, `boundary.png`, `dispatch.png`.", ""]
    return "\n".join(out)


def plots(results: dict, out_dir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    sec = results["sections"]
    k = [r for r in sec.get("kernels", {}).get("rows", []) if "median_s" in r and r["dtype"] == "float32"]
    stream = {
        (r["kernel"], r["threads"]): r["gbs"] for r in sec.get("stream", {}).get("rows", []) if "gbs" in r
    }
    if k:
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        for ax, op, ref in ((axes[0], "scale_shift", "scale"), (axes[1], "add", "add")):
            for impl in sorted({r["impl"] for r in k if r["op"] == op}):
                pts = sorted((r["n"], r["gbs"]) for r in k if r["op"] == op and r["impl"] == impl)
                ax.plot(
                    *zip(*pts), marker="o", label=impl, linestyle="--" if impl.startswith("STREAM") else "-"
                )
            for (kern, threads), gbs in stream.items():
                if kern == ref:
                    ax.axhline(gbs, color="grey", linestyle=":", label=f"STREAM {ref}, {threads} thread(s)")
            ax.set_xscale("log")
            ax.set_xlabel("elements (float32)")
            ax.set_ylabel("GB/s (bytes moved / time)")
            ax.set_title(op)
            ax.legend(fontsize=7)
        fig.tight_layout()
        made.append(_save(fig, out_dir, "kernels_gbs.png"))
        plt.close(fig)
    b = [r for r in sec.get("boundary", {}).get("rows", []) if r.get("kind") == "size"]
    if b:
        fig, ax = plt.subplots(figsize=(7, 5))
        for impl in sorted({r["impl"] for r in b}):
            pts = sorted((r["n"], r["median_s"]) for r in b if r["impl"] == impl)
            ax.plot(*zip(*pts), marker="o", label=impl)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("elements")
        ax.set_ylabel("seconds per call")
        ax.set_title("the boundary: list -> std::vector -> list vs zero-copy")
        ax.legend(fontsize=8)
        made.append(_save(fig, out_dir, "boundary.png"))
        plt.close(fig)
    d = [r for r in sec.get("dispatch", {}).get("rows", []) if "median_s" in r]
    if d:
        fig, ax = plt.subplots(figsize=(8, 4))
        labels = [f"{r['impl']}\n({r['process']})" for r in d]
        ax.barh(
            labels,
            [r["median_s"] * 1e6 for r in d],
            xerr=[
                [(r["median_s"] - r["min_s"]) * 1e6 for r in d],
                [(r["max_s"] - r["median_s"]) * 1e6 for r in d],
            ],
        )
        ax.set_xlabel("microseconds per call, 1-element tensors")
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        made.append(_save(fig, out_dir, "dispatch.png"))
        plt.close(fig)
    return made


def _save(fig, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    return path


def write(results: dict, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "results.json"), os.path.join(out_dir, "report.md")]
    with open(paths[0], "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(paths[1], "w") as f:
        f.write(markdown(results))
    return paths + plots(results, out_dir)
