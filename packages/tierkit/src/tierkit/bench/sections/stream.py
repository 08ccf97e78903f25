"""1. The limit: STREAM-style bandwidth with torch's own loops."""

from __future__ import annotations

from ..timing import interleaved
from ._common import ALPHA, Config, gbs, need, row, table, timed, timed_rows

TITLE = "The limit: STREAM bandwidth (torch loops, arrays far beyond the caches)"


def measure(cfg: Config) -> list[dict]:
    """STREAM-style bandwidth with torch's own loops (copy, scale, add, triad)
    over arrays far larger than the caches; bytes counted as STREAM does."""
    torch = need("torch")
    n = (1 << 23) if cfg.quick else (1 << 25)  # 32 MiB / 128 MiB per float32 array
    a, b, c = (torch.rand(n) for _ in range(3))
    kernels = {
        "copy": (lambda: b.copy_(a), 2),
        "scale": (lambda: torch.mul(a, ALPHA, out=b), 2),
        "add": (lambda: torch.add(a, b, out=c), 3),
        "triad": (lambda: torch.add(b, c, alpha=ALPHA, out=a), 3),
    }
    rows = []
    saved = torch.get_num_threads()
    try:
        for threads in sorted({1, saved}):
            torch.set_num_threads(threads)
            samples = interleaved({k: fn for k, (fn, _) in kernels.items()}, cfg.reps)
            for k, (_, arrays) in kernels.items():
                s = samples[k]
                rows.append(
                    row("stream", s, kernel=k, threads=threads, n=n, gbs=gbs(arrays * n * 4, s.median))
                )
    finally:
        torch.set_num_threads(saved)
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["kernel", "threads", "GB/s", "time"],
            [[r["kernel"], r["threads"], f"{r['gbs']:.1f}", timed(r)] for r in timed_rows(results, "stream")],
        )
    ]


def targets(results: dict) -> list[dict]:
    return []
