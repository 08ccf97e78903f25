"""7. Allocation: where the time of a large new output goes."""

from __future__ import annotations

from ..timing import interleaved, paired_ratio
from ._common import ALPHA, BETA, Config, need, not_measured, pick, row, table, target, timed, timed_rows

TITLE = "Allocation: where the time of a large new output goes"


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    torch = need("torch")
    tb = need("tierkit_bridge")
    tt = need("tierkit_torch")
    n = 4_000_000 if cfg.quick else 64_000_000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    xt = torch.from_numpy(x)
    out = np.empty_like(x)
    out_t = torch.empty_like(xt)
    op = torch.ops.tierkit.scale_shift

    def torch_allocator():
        tt.allocator.set_enabled(False)
        try:
            return op(xt, ALPHA, BETA)
        finally:
            tt.allocator.set_enabled(True)

    def cached():
        tb.allocator.set_enabled(True)
        try:
            return tb.scale_shift(x, ALPHA, BETA)
        finally:
            tb.allocator.set_enabled(False)

    impls = {
        "bridge out= (preallocated)": lambda: tb.scale_shift(x, ALPHA, BETA, out=out),
        "bridge, new output (system allocator)": lambda: tb.scale_shift(x, ALPHA, BETA),
        "bridge, new output (caching allocator, warm)": cached,
        "torch op .out (preallocated)": lambda: op.out(xt, ALPHA, BETA, out=out_t),
        "torch op, new output (warm: tierkit_torch.allocator)": lambda: op(xt, ALPHA, BETA),
        "torch op, new output (torch CPU allocator)": torch_allocator,
        "torch eager alpha*x+beta": lambda: ALPHA * xt + BETA,
        "numpy alpha*x+beta": lambda: ALPHA * x + BETA,
    }
    tb.allocator.release_cached()
    tt.allocator.set_enabled(True)
    samples = interleaved(impls, max(3, cfg.reps - 2), 1, warmup=2)
    ref = samples["bridge out= (preallocated)"]
    rows = [row("allocation", s, impl=impl, n=n, vs_out=paired_ratio(s, ref)) for impl, s in samples.items()]
    # The torch op's allocating forms against its own .out (time of .out / time allocating).
    for impl in (
        "torch op, new output (warm: tierkit_torch.allocator)",
        "torch op, new output (torch CPU allocator)",
    ):
        rows.append(
            {
                "section": "allocation",
                "kind": "torch vs .out",
                "impl": impl,
                "n": n,
                "out_over_alloc": paired_ratio(samples["torch op .out (preallocated)"], samples[impl]),
            }
        )
    rows.append({"section": "allocation", "impl": "caching allocator stats", **tb.allocator.stats()})
    rows.append({"section": "allocation", "impl": "tierkit_torch.allocator stats", **tt.allocator.stats()})
    tb.allocator.release_cached()
    tt.allocator.release_cached()
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["impl", "n", "time", "vs out="],
            [
                [r["impl"], f"{r['n']:,}", timed(r), f"{r['vs_out']:.2f}x"]
                for r in timed_rows(results, "allocation")
            ],
        ),
        "",
        "The torch op's allocating forms against its own `.out` (`.out` time / allocating time, paired):",
        "",
        table(
            ["impl", "n", ".out / allocating"],
            [
                [r["impl"], f"{r['n']:,}", f"{r['out_over_alloc']:.2f}"]
                for r in pick(results["sections"].get("allocation", {}).get("rows", []), kind="torch vs .out")
            ],
        ),
    ]


def targets(results: dict) -> list[dict]:
    out = []
    a = timed_rows(results, "allocation")
    cached = pick(a, impl="bridge, new output (caching allocator, warm)")
    name = "bridge allocating scale_shift with warm caching allocator <= 1.3 x out= time at 6.4e7"
    if cached and cached[0]["n"] >= 64_000_000:
        out.append(target(name, 1.3, round(cached[0]["vs_out"], 2), cached[0]["vs_out"] <= 1.3))
    else:
        out.append(not_measured(name, 1.3, "measured at a smaller size in --quick"))
    name = "torch op allocating scale_shift (warm outputs): .out time / its time >= 0.9 at 6.4e7"
    warm = pick(
        results["sections"].get("allocation", {}).get("rows", []),
        kind="torch vs .out",
        impl="torch op, new output (warm: tierkit_torch.allocator)",
    )
    if warm and warm[0]["n"] >= 64_000_000:
        out.append(target(name, 0.9, round(warm[0]["out_over_alloc"], 2), warm[0]["out_over_alloc"] >= 0.9))
    else:
        out.append(not_measured(name, 0.9, "measured at a smaller size in --quick"))
    return out
