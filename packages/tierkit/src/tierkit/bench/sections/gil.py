"""6. GIL: Python threads calling the bridge, kernels single-threaded."""

from __future__ import annotations

import threading
import time

from ..timing import Samples
from ._common import ALPHA, BETA, Config, gbs, need, row, table, timed, timed_rows

TITLE = "GIL: Python threads calling the bridge's scale_shift(out=), kernels single-threaded"


def measure(cfg: Config) -> list[dict]:
    np = need("numpy")
    tb = need("tierkit_bridge")
    n = 1_000_000 if cfg.quick else 16_000_000
    calls = 4 if cfg.quick else 8
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    rows = []
    saved = tb.get_num_threads()
    tb.set_num_threads(1)  # one core per Python thread: the scaling is the GIL's doing
    try:
        for k in (1, 2, 4):
            outs = [np.empty_like(x) for _ in range(k)]

            def work(i):
                for _ in range(calls):
                    tb.scale_shift(x, ALPHA, BETA, out=outs[i])

            walls = []
            for _ in range(cfg.reps):
                threads = [threading.Thread(target=work, args=(i,)) for i in range(k)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                walls.append(time.perf_counter() - t0)
            s = Samples(walls)
            rows.append(
                row(
                    "gil",
                    s,
                    threads=k,
                    n=n,
                    calls_per_thread=calls,
                    gbs=gbs(k * calls * 2 * n * 4, s.median),
                )
            )
    finally:
        tb.set_num_threads(saved)
    base = rows[0]["gbs"]
    for r in rows:
        r["speedup_vs_1"] = r["gbs"] / base
    return rows


def markdown(results: dict) -> list[str]:
    return [
        table(
            ["threads", "wall", "aggregate GB/s", "vs 1 thread"],
            [
                [r["threads"], timed(r), f"{r['gbs']:.1f}", f"{r['speedup_vs_1']:.2f}x"]
                for r in timed_rows(results, "gil")
            ],
        )
    ]


def targets(results: dict) -> list[dict]:
    return []
