"""7. Allocation: where the time of a large new output goes."""

from __future__ import annotations

from ..timing import interleaved, paired_ratio
from ._common import ALPHA, BETA, Config, need, not_measured, pick, row, table, target, timed, timed_rows

TITLE = "Allocation: where the time of a large new output goes"


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    torch = need("torch")
    tb = need("tierkit_bridge")
    need("tierkit_torch")
    n = 4_000_000 if cfg.quick else 64_000_000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    xt = torch.from_numpy(x)
    out = np.empty_like(x)

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
        "torch op, new output (torch CPU allocator)": lambda: torch.ops.tierkit.scale_shift(xt, ALPHA, BETA),
        "torch eager alpha*x+beta": lambda: ALPHA * xt + BETA,
        "numpy alpha*x+beta": lambda: ALPHA * x + BETA,
    }
    tb.allocator.release_cached()
    samples = interleaved(impls, max(3, cfg.reps - 2), 1, warmup=2)
    ref = samples["bridge out= (preallocated)"]
    rows = [row("allocation", s, impl=impl, n=n, vs_out=paired_ratio(s, ref)) for impl, s in samples.items()]
    rows.append({"section": "allocation", "impl": "caching allocator stats", **tb.allocator.stats()})
    tb.allocator.release_cached()
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["impl", "n", "time", "vs out="],
            [
                [r["impl"], f"{r['n']:,}", timed(r), f"{r['vs_out']:.2f}x"]
                for r in timed_rows(results, "allocation")
            ],
        )
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
    return out
