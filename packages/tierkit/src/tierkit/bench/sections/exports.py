"""5. DLPack / buffer-protocol export of a tierkit Buffer: cost vs size."""

from __future__ import annotations

from ..timing import interleaved
from ._common import Config, need, pick, row, table, target, timed, timed_rows

TITLE = "DLPack / buffer-protocol export of a tierkit Buffer"


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    torch = need("torch")
    tb = need("tierkit_bridge")
    rows = []
    for n in [1_000, 1_000_000] if cfg.quick else [1_000, 64_000_000]:
        buf = tb.Buffer.empty(n, "float32")
        samples = interleaved(
            {
                "np.from_dlpack": lambda: np.from_dlpack(buf),
                "torch.from_dlpack": lambda: torch.from_dlpack(buf),
                "np.asarray (buffer protocol)": lambda: np.asarray(buf),
                "memoryview": lambda: memoryview(buf),
            },
            cfg.reps,
            5_000,
        )
        rows += [row("exports", s, impl=impl, n=n) for impl, s in samples.items()]
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["impl", "n", "per call"],
            [[r["impl"], f"{r['n']:,}", timed(r)] for r in timed_rows(results, "exports")],
        )
    ]


def targets(results: dict) -> list[dict]:
    out = []
    e = timed_rows(results, "exports")
    sizes = sorted({r["n"] for r in e})
    name = "DLPack / buffer-protocol export at 6.4e7 <= 2 x at 1e3"
    if len(sizes) >= 2:
        worst, detail = 0.0, []
        for impl in sorted({r["impl"] for r in e}):
            lo, hi = pick(e, impl=impl, n=sizes[0]), pick(e, impl=impl, n=sizes[-1])
            ratio = hi[0]["median_s"] / lo[0]["median_s"]
            worst = max(worst, ratio)
            detail.append(f"{impl}: {ratio:.2f}")
        met = worst <= 2.0 if sizes[-1] >= 64_000_000 else None
        out.append(
            target(
                name, 2.0, round(worst, 2), met, f"n={sizes[-1]:.1e} vs {sizes[0]:.0e}: " + "; ".join(detail)
            )
        )
    return out
