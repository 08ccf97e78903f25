"""3. The boundary: the list path vs zero-copy, per-call cost, batching."""

from __future__ import annotations

from ..timing import inner_for, interleaved
from ._common import (
    ALPHA,
    BETA,
    Config,
    color_of,
    need,
    not_measured,
    pick,
    row,
    table,
    target,
    timed,
    timed_rows,
)

TITLE = "The boundary"


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    tb = need("tierkit_bridge")
    torch = need("torch")
    need("tierkit_torch")
    rows = []
    sizes = [1_000, 10_000] if cfg.quick else [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    for n in sizes:
        cfg.log(f"boundary: n={n:,}")
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.random.default_rng(1).random(n, dtype=np.float32)
        lx, ly = x.tolist(), y.tolist()
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        reps = 3 if n >= 1_000_000 else cfg.reps
        slow = interleaved(
            {"vector_add_list": lambda: tb.vector_add_list(lx, ly)}, reps, inner_for(n * 60e-9, 0.05)
        )
        fast = interleaved(
            {
                "bridge add (numpy, zero-copy)": lambda: tb.add(x, y),
                "torch op custom_add": lambda: torch.ops.tierkit.custom_add(xt, yt),
            },
            reps,
            inner_for(n * 4 / 10e9),
        )
        for impl, s in {**slow, **fast}.items():
            rows.append(row("boundary", s, kind="size", impl=impl, n=n))
    py_noop = lambda: None  # noqa: E731
    calls = interleaved({"bound no-op (pybind11)": tb._noop, "Python no-op": py_noop}, cfg.reps, 100_000)
    for impl, s in calls.items():
        rows.append(row("boundary", s, kind="per-call", impl=impl, n=0))
    # The same 1M elements as 1000 calls of 1000, or one call.
    x = np.random.default_rng(2).random((1000, 1000), dtype=np.float32)
    out = np.empty_like(x)
    rows_x, rows_out = list(x), list(out)

    def many():
        for xi, oi in zip(rows_x, rows_out):
            tb.scale_shift(xi, ALPHA, BETA, out=oi)

    batch = interleaved(
        {"1000 calls x 1000": many, "1 call x 1000000": lambda: tb.scale_shift(x, ALPHA, BETA, out=out)},
        cfg.reps,
    )
    for impl, s in batch.items():
        rows.append(row("boundary", s, kind="batching", impl=impl, n=1_000_000))
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["kind", "impl", "n", "time"],
            [[r["kind"], r["impl"], r["n"], timed(r)] for r in timed_rows(results, "boundary")],
        )
    ]


def targets(results: dict) -> list[dict]:
    out = []
    b = timed_rows(results, "boundary")
    slow = pick(b, impl="vector_add_list", n=1_000_000)
    fast = pick(b, impl="bridge add (numpy, zero-copy)", n=1_000_000)
    name = "zero-copy add >= 100x faster than vector_add_list at 1e6"
    if slow and fast:
        ratio = slow[0]["median_s"] / fast[0]["median_s"]
        out.append(target(name, 100, round(ratio), ratio >= 100))
    else:
        out.append(not_measured(name, 100, "1e6 not in this run (--quick)"))
    return out


def plots(results: dict, out_dir: str, plt, save) -> list[str]:
    made = []
    sec = results["sections"]
    b = [r for r in sec.get("boundary", {}).get("rows", []) if r.get("kind") == "size"]
    if b:
        fig, ax = plt.subplots(figsize=(7, 5))
        for impl in sorted({r["impl"] for r in b}):
            pts = sorted((r["n"], r["median_s"]) for r in b if r["impl"] == impl)
            ax.plot(*zip(*pts), marker="o", label=impl, color=color_of(impl))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("elements")
        ax.set_ylabel("seconds per call")
        ax.set_title("the boundary: list -> std::vector -> list vs zero-copy")
        ax.legend(fontsize=8)
        made.append(save(fig, "boundary.png"))
        plt.close(fig)
    return made
