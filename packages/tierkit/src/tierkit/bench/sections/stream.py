"""1. The limit: a compiled STREAM kernel (copy, scale, add, triad) with
ordinary and non-temporal stores, on arrays beyond the caches, beside
torch's own loops (the figures once called "STREAM") and tierkit's out= ops,
all in the same repetitions."""

from __future__ import annotations

import math
from typing import Any

from .. import limit, stream_lib
from ..timing import Samples, interleaved
from ._common import ALPHA, BETA, Config, Skip, gbs, need, row, table, target, timed, timed_rows

TITLE = "The limit: compiled STREAM bandwidth (ordinary and non-temporal stores, arrays beyond the caches)"

# tierkit's out= ops measured beside the limit: impl -> (op, STREAM kernel, whose threads)
OPS = {
    "bridge out= scale_shift": ("scale_shift", "scale", "pool"),
    "bridge out= add": ("add", "add", "pool"),
    "torch op out= scale_shift": ("scale_shift", "scale", "torch"),
    "torch add_out": ("add", "add", "torch"),
}


REMEASURE = 2  # runs more where a bandwidth flip put a figure above its limit


def beyond_n(cache_list: list[dict]) -> int:
    """float32 elements an array needs to be beyond the caches (at least
    6.4e7, the kernels section's largest size)."""
    llc = limit.llc_bytes(cache_list)
    need_n = 0 if llc is None else math.ceil(limit.BEYOND * llc / 4)
    return max(64_000_000, -(-need_n // 1_000_000) * 1_000_000)


def limit_impls(streams: dict[int, stream_lib.Stream], kernels, stores) -> dict[str, Any]:
    """The compiled kernels as self-timed implementations, by name."""
    return {
        impl_name(k, store, t): s.timer(k, store, ALPHA)
        for t, s in streams.items()
        for k in kernels
        for store in stores
    }


def impl_name(kernel: str, store: str, threads: int) -> str:
    return f"STREAM {kernel} ({store} stores, {threads}T)"


def limit_samples(samples: dict[str, Samples], kernel: str, threads: int, stores) -> list[float]:
    """Per repetition, the fastest compiled form on at most `threads` threads:
    an op allowed T threads may use fewer, and core's pool hands off slower
    than a spinning OpenMP pool on mid sizes, so T threads alone is no limit."""
    prefix = f"STREAM {kernel} ("
    counts = sorted({int(name.rsplit(", ", 1)[1][:-2]) for name in samples if name.startswith(prefix)})
    return limit.limit_seconds(
        *(samples[impl_name(kernel, store, t)].seconds for t in counts if t <= threads for store in stores)
    )


def measure(cfg: Config) -> list[dict]:
    need("numpy")
    torch = need("torch")
    tb = need("tierkit_bridge")
    need("tierkit_torch")
    try:
        stream_lib.library()
    except stream_lib.BuildError as exc:
        raise Skip(f"the STREAM kernel cannot be built here: {exc}") from exc
    cache_list = limit.caches()
    # --quick: at most 6.4e7 (256 MB an array). Where the last level reads huge (480 MiB on a VM
    # reporting its host's L3), beyond the caches is 2 GB an array and 40 s of the quick run's 80;
    # the rows' regime then says "mixed", not "memory", and no quick figure is a target's.
    n = min(beyond_n(cache_list), 64_000_000) if cfg.quick else beyond_n(cache_list)
    pool_t, torch_t = stream_lib.default_threads(), torch.get_num_threads()
    # --quick: only the threads the ops run on. The one-thread copy doubles the
    # section (its own arrays beyond the caches, first touched, and half the
    # kernels' runs: 115 s -> ~60 s on a VM whose L3 reads 480 MiB).
    threads = sorted({pool_t, torch_t} if cfg.quick else {1, pool_t, torch_t})
    cfg.log(f"stream: compiled kernel ({stream_lib.simd()}), n={n:,}, threads {threads}")
    streams = {t: stream_lib.Stream(n, t) for t in threads}
    stores = [s for s in limit.STORES if streams[threads[0]].has(s)]
    impls: dict[str, Any] = limit_impls(streams, limit.KERNELS, stores)
    # Any finite values do (bandwidth does not depend on them); torch.rand took 12 s for three such arrays.
    a, b, c = (torch.full((n,), v) for v in (0.25, 0.5, 0.75))
    x, y, out = a.numpy(), b.numpy(), c.numpy()
    ops = torch.ops.tierkit
    impls.update(
        {
            "torch loop copy": lambda: c.copy_(a),
            "torch loop scale": lambda: torch.mul(c, ALPHA, out=b),
            "torch loop add": lambda: torch.add(a, b, out=c),
            "torch loop triad": lambda: torch.add(b, c, alpha=ALPHA, out=a),
            "bridge out= scale_shift": lambda: tb.scale_shift(x, ALPHA, BETA, out=out),
            "bridge out= add": lambda: tb.add(x, y, out=out),
            "torch op out= scale_shift": lambda: ops.scale_shift.out(a, ALPHA, BETA, out=c),
            "torch add_out": lambda: ops.add_out(a, b, c),
        }
    )
    # Memory bandwidth here flips between rates for tens of seconds: a figure above its limit
    # (a flip between the limit's samples and the op's) is measured again, up to REMEASURE
    # times, rather than failing the session; the rows say how many runs it took.
    runs = 0
    while True:
        runs += 1
        rows = _rows(interleaved(impls, cfg.reps), n, threads, stores, pool_t, torch_t, cache_list)
        flipped = [r for r in rows if limit.is_error(r.get("of_limit"), r.get("regime"))]
        if not flipped or runs > REMEASURE:
            break
        cfg.log(f"stream: {len(flipped)} figure(s) above {limit.ERROR} x the limit: measuring again")
    for r in rows:
        r["runs"] = runs
    for s_ in streams.values():
        s_.close()
    return rows


def _rows(samples, n, threads, stores, pool_t, torch_t, cache_list) -> list[dict]:
    rows = []
    for k, (_, arrays) in limit.KERNELS.items():
        kind = limit.regime([n * 4] * arrays, cache_list)
        for t in threads:
            for store in stores:
                s = samples[impl_name(k, store, t)]
                rows.append(
                    row("stream", s, kernel=k, impl="compiled", store=store, threads=t, n=n,
                        gbs=gbs(arrays * n * 4, s.median), regime=kind)
                )  # fmt: skip
            s = Samples(limit_samples(samples, k, t, stores))
            rows.append(
                row("stream", s, kernel=k, impl="limit", store="faster form", threads=t, n=n,
                    gbs=gbs(arrays * n * 4, s.median), regime=kind)
            )  # fmt: skip
        s = samples[f"torch loop {k}"]
        rows.append(
            row("stream", s, kernel=k, impl="torch loop", store="torch", threads=torch_t, n=n,
                gbs=gbs(arrays * n * 4, s.median), regime=kind,
                of_limit=limit.fraction(limit_samples(samples, k, torch_t, stores), s.seconds))
        )  # fmt: skip
    for impl, (op, k, whose) in OPS.items():
        t = pool_t if whose == "pool" else torch_t
        arrays = limit.KERNELS[k][1]
        s = samples[impl]
        rows.append(
            row("stream", s, kernel=k, impl=impl, op=op, store="tierkit", threads=t, n=n,
                gbs=gbs(arrays * n * 4, s.median), regime=limit.regime([n * 4] * arrays, cache_list),
                of_limit=limit.fraction(limit_samples(samples, k, t, stores), s.seconds))
        )  # fmt: skip
    return rows


def _caches_line(m: dict) -> str:
    cache_list = m.get("caches") or []
    if not cache_list:
        return "Caches: not known here (no sysfs facts), so no size is called beyond the caches."
    llc = limit.llc_bytes(cache_list) or 0
    levels = ", ".join(
        f"{c['level']} {limit.human(c['size'])}" + (f" x{c['instances']}" if c["instances"] > 1 else "")
        for c in cache_list
    )
    return (
        f"Caches (sysfs): {levels}. An array size is beyond the caches only when every array the kernel "
        f"touches is >= {limit.BEYOND} x the last level ({limit.human(limit.BEYOND * llc)} here)."
    )


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "stream")
    m = results.get("machine", {})
    out = [_caches_line(m), ""]
    if m.get("stream_build"):
        out += [
            f"Kernel: `{m['stream_build']}` (vector level {m.get('stream_simd')}; core's ThreadPool and grain; "
            "arrays first touched by the threads that run the kernels). The limit of a kernel on T threads is, in "
            "each repetition, the fastest of its two store forms on 1 to T threads; every other row's "
            '"of limit" is paired with that per repetition at its own thread count.',
            "",
        ]
    if rows and "impl" in rows[0]:
        n = rows[0]["n"]
        out += [f"n = {n:.2e} float32 ({limit.human(n * 4)} an array).", ""]
    out.append(
        table(
            ["kernel", "implementation", "stores", "threads", "GB/s", "of limit", "time"],
            [
                [
                    r["kernel"],
                    r.get("impl", "torch loop"),
                    r.get("store", "—"),
                    r["threads"],
                    f"{r['gbs']:.1f}",
                    limit.fmt_fraction(r.get("of_limit"), r.get("regime")),
                    timed(r),
                ]
                for r in rows
            ],
        )
    )
    return out


def fraction_rows(results: dict) -> list[tuple[str, dict, float]]:
    """(section, row, fraction of its limit) for every figure that has one."""
    out = []
    for section, key in (("stream", "of_limit"), ("kernels", "fraction_of_limit")):
        for r in timed_rows(results, section):
            if r.get(key) is not None:
                out.append((section, r, r[key]))
    return out


def _kind(r: dict) -> str | None:
    return r.get("regime") or r.get("limit_kind")


def describe(section: str, r: dict, frac: float) -> str:
    what = r.get("impl", "?") + (f" {r['op']}" if r.get("op") and r["op"] not in r.get("impl", "") else "")
    kind = _kind(r) or "?"
    return f"{section}: {what} n={r['n']:.3g} {r['threads']}T: {frac:.2f} of {limit.regime_label(kind)}"


def targets(results: dict) -> list[dict]:
    name = f"no figure above {limit.ERROR} x its memory limit (else: a measurement error, the session fails)"
    rows = fraction_rows(results)
    if not rows:
        return [
            target(name, limit.ERROR, None, None, "no figure compared with the compiled limit in this run")
        ]
    memory = [x for x in rows if _kind(x[1]) in (None, "memory")]
    worst = max(memory or rows, key=lambda x: x[2])
    errors = [x for x in rows if limit.is_error(x[2], _kind(x[1]))]
    above = [x for x in rows if limit.above_reference(x[2], _kind(x[1]))]
    detail = (
        "MEASUREMENT ERROR: " + "; ".join(describe(*x) for x in errors)
        if errors
        else f"highest: {describe(*worst)} ({len(rows)} figures)"
    )
    if above:
        detail += "; in cache, above the compiled kernel (a reference, not a roof): " + "; ".join(
            describe(*x) for x in above
        )
    t = target(name, limit.ERROR, round(worst[2], 3), not errors, detail)
    if errors:
        t["error"] = True
    return [t]
