"""2. Kernels: every implementation of scale_shift and add, side by side."""

from __future__ import annotations

import time
from typing import Any

from ..timing import inner_for, interleaved, paired_ratio
from ._common import (
    ALPHA,
    BETA,
    Config,
    gbs,
    need,
    not_measured,
    pick,
    row,
    table,
    target,
    timed,
    timed_rows,
)

TITLE = "Kernels (float32 unless stated; GB/s = bytes the op must move / time)"


def kernel_sizes(cfg: Config) -> list[int]:
    return (
        [1_000, 100_000, 1_000_000]
        if cfg.quick
        else [1_000, 10_000, 100_000, 1_000_000, 16_000_000, 64_000_000]
    )


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    torch = need("torch")
    tb = need("tierkit_bridge")
    need("tierkit_torch")
    ops = torch.ops.tierkit
    compiled_ss: Any = None
    compiled_add: Any = None
    if not cfg.quick:
        compiled_ss = torch.compile(lambda x: ALPHA * x + BETA, dynamic=True)  # one compile for every size
        compiled_add = torch.compile(lambda x, y: x + y, dynamic=True)
    rows = []
    for n in kernel_sizes(cfg):
        cfg.log(f"kernels: n={n:,}")
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.random.default_rng(1).random(n, dtype=np.float32)
        out = np.empty_like(x)
        xt, yt, outt = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(out)
        reps = cfg.reps if n < 16_000_000 else max(3, cfg.reps - 2)
        inner = inner_for(n * 4 / 20e9)
        compile_s = {}
        ss = {
            "bridge out=": lambda: tb.scale_shift(x, ALPHA, BETA, out=out),
            "bridge": lambda: tb.scale_shift(x, ALPHA, BETA),
            "torch op": lambda: ops.scale_shift(xt, ALPHA, BETA),
            "numpy": lambda: ALPHA * x + BETA,
            "torch eager": lambda: ALPHA * xt + BETA,
            "STREAM scale": lambda: torch.mul(xt, ALPHA, out=outt),
        }
        add = {
            "bridge out=": lambda: tb.add(x, y, out=out),
            "bridge": lambda: tb.add(x, y),
            "torch add_out": lambda: ops.add_out(xt, yt, outt),
            "torch op": lambda: ops.custom_add(xt, yt),
            "numpy": lambda: x + y,
            "torch eager": lambda: xt + yt,
            "STREAM add": lambda: torch.add(xt, yt, out=outt),
        }
        if compiled_ss is not None:
            for name, fn, impls in (
                ("scale_shift", lambda: compiled_ss(xt), ss),
                ("add", lambda: compiled_add(xt, yt), add),
            ):
                t0 = time.perf_counter()
                fn()
                compile_s[name] = time.perf_counter() - t0
                impls["torch.compile"] = fn
        for op, impls, arrays, ref in (("scale_shift", ss, 2, "STREAM scale"), ("add", add, 3, "STREAM add")):
            samples = interleaved(impls, reps, inner)
            for impl, s in samples.items():
                rows.append(
                    row(
                        "kernels",
                        s,
                        op=op,
                        impl=impl,
                        dtype="float32",
                        n=n,
                        gbs=gbs(arrays * n * 4, s.median),
                        fraction_of_stream=paired_ratio(samples[ref], s),
                        compile_s=compile_s.get(op) if impl == "torch.compile" else None,
                    )
                )
        # The torch op on the other dtypes, against eager.
        if n >= 100_000:
            for dtype in (torch.float64, torch.bfloat16):
                xd = xt.to(dtype)
                samples = interleaved(
                    {
                        "torch op": lambda: ops.scale_shift(xd, ALPHA, BETA),
                        "torch eager": lambda: ALPHA * xd + BETA,
                    },
                    reps,
                    inner,
                )
                item = xd.element_size()
                for impl, s in samples.items():
                    rows.append(
                        row(
                            "kernels",
                            s,
                            op="scale_shift",
                            impl=impl,
                            dtype=str(dtype).removeprefix("torch."),
                            n=n,
                            gbs=gbs(2 * n * item, s.median),
                        )
                    )
    return rows


def markdown(results: dict) -> list[str]:
    k = timed_rows(results, "kernels")
    out = [
        table(
            ["op", "n", "impl", "dtype", "time", "GB/s", "of STREAM"],
            [
                [
                    r["op"],
                    f"{r['n']:,}",
                    r["impl"],
                    r["dtype"],
                    timed(r),
                    f"{r['gbs']:.1f}",
                    f"{r['fraction_of_stream']:.2f}" if r.get("fraction_of_stream") else "—",
                ]
                for r in k
            ],
        )
    ]
    comp = [r for r in k if r.get("compile_s")]
    if comp:
        out += [
            "",
            "torch.compile compile times (excluded above): "
            + ", ".join(f"{r['op']} n={r['n']:,}: {r['compile_s']:.1f} s" for r in comp),
        ]
    speed = []
    for r in k:
        if r["impl"] in ("torch op", "bridge", "bridge out=", "torch add_out") and r["dtype"] == "float32":
            alts = {
                a["impl"]: a for a in k if a["op"] == r["op"] and a["n"] == r["n"] and a["dtype"] == "float32"
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
        table(["op", "n", "ours", "vs numpy", "vs torch eager", "vs torch.compile"], speed),
    ]
    return out


def targets(results: dict) -> list[dict]:
    out = []
    k = timed_rows(results, "kernels")
    big = [n for n in {r["n"] for r in k} if n >= 16_000_000]

    # Bandwidth into a preallocated output vs STREAM, same repetition.
    for op, impl, ref in (
        ("scale_shift", "bridge out=", "STREAM scale"),
        ("add", "torch add_out", "STREAM add"),
    ):
        name = f"{impl} {op} >= 0.9 x {ref} at >= 1.6e7 float32"
        rows = [r for n in big for r in pick(k, op=op, impl=impl, n=n, dtype="float32")]
        if not rows:
            out.append(not_measured(name, 0.9, "no size >= 1.6e7 in this run (--quick)"))
            continue
        worst = min(r["fraction_of_stream"] for r in rows)
        out.append(
            target(
                name,
                0.9,
                round(worst, 3),
                worst >= 0.9,
                "; ".join(
                    f"n={r['n']:.1e}: {r['gbs']:.1f} GB/s ({r['fraction_of_stream']:.2f})" for r in rows
                ),
            )
        )

    # The allocating torch op vs eager, numpy, torch.compile.
    for alt, factor in (("torch eager", 1.5), ("numpy", 1.5), ("torch.compile", 1.0)):
        verb = f">= {factor}x faster than" if factor > 1 else "not slower than"
        name = f"torch op scale_shift (allocating) {verb} {alt} at >= 1.6e7"
        pairs = []
        for n in big:
            ours = pick(k, op="scale_shift", impl="torch op", n=n, dtype="float32")
            theirs = pick(k, op="scale_shift", impl=alt, n=n, dtype="float32")
            if ours and theirs:
                pairs.append((n, theirs[0]["median_s"] / ours[0]["median_s"]))
        if not pairs:
            out.append(not_measured(name, factor, f"{alt} not measured at >= 1.6e7 in this run"))
            continue
        worst = min(p for _, p in pairs)
        out.append(
            target(
                name,
                factor,
                round(worst, 2),
                worst >= factor * (0.98 if factor == 1.0 else 1.0),
                "; ".join(f"n={n:.1e}: {p:.2f}x" for n, p in pairs),
            )
        )
    return out


def plots(results: dict, out_dir: str, plt, save) -> list[str]:
    sec = results["sections"]
    made = []
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
        made.append(save(fig, "kernels_gbs.png"))
        plt.close(fig)
    return made
