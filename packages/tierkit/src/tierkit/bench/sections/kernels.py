"""2. Kernels: every implementation of scale_shift and add, side by side.

Allocating implementations are compared with allocating ones and out= with
out=. torch's peers are also measured in a subprocess started with
THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up), where torch backs large
allocations with huge pages as tierkit does: the "not slower than
torch.compile" target uses that fair figure, paired per repetition.

Every row's "of limit" is its bandwidth over the compiled STREAM kernel's
(stream_lib.py) at the same size and the implementation's own thread count,
the faster of its two store forms, paired per repetition; the kernel runs in
the same repetitions. Beyond the caches (limit.py) that is the memory's
limit; below, the same kernel's cache bandwidth, labelled so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from .. import limit, stream_lib
from ..timing import Samples, inner_for, interleaved
from . import stream
from ._common import (
    ALPHA,
    BETA,
    Config,
    color_of,
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

THP_PROBE = textwrap.dedent("""
    import json, sys, torch, tierkit_torch
    from tierkit.bench.timing import inner_for, interleaved, paired_ratio
    reps, sizes, alpha, beta = int(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    with_compile = sys.argv[5] == "1"
    compiled = torch.compile(lambda x: alpha * x + beta, dynamic=True) if with_compile else None
    out = []
    for n in sizes:
        x = torch.rand(n)
        impls = {"torch op": lambda: torch.ops.tierkit.scale_shift(x, alpha, beta),
                 "torch eager (THP)": lambda: alpha * x + beta}
        if compiled is not None:
            compiled(x)  # compiled once per process (dynamic), warmed per size
            impls["torch.compile (THP)"] = lambda: compiled(x)
        s = interleaved(impls, reps, inner_for(n * 8 / 20e9))
        for impl in [k for k in impls if k != "torch op"]:
            out.append({"n": n, "impl": impl, "seconds": s[impl].seconds,
                        "ours_over_theirs": paired_ratio(s[impl], s["torch op"])})
    print(json.dumps(out))
""")


def _thp_peers(cfg: Config, sizes: list[int]) -> list[dict]:
    """torch eager and torch.compile scale_shift with torch's huge-page
    allocation, beside the torch op, in a subprocess (THP is read at start-up)."""
    from ..timing import Samples

    proc = subprocess.run(
        # --quick: no torch.compile peer (a graph compile costs ~10 s; no quick target reads it)
        [
            sys.executable,
            "-c",
            THP_PROBE,
            str(cfg.reps),
            json.dumps(sizes),
            str(ALPHA),
            str(BETA),
            "0" if cfg.quick else "1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "THP_MEM_ALLOC_ENABLE": "1"},
    )
    if proc.returncode != 0:
        cfg.log(f"kernels: THP subprocess failed: {proc.stderr[-300:]}")
        return []
    rows = []
    for r in json.loads(proc.stdout.strip().splitlines()[-1]):
        s = Samples(r["seconds"])
        rows.append(
            row(
                "kernels",
                s,
                op="scale_shift",
                impl=r["impl"],
                dtype="float32",
                n=r["n"],
                gbs=gbs(2 * r["n"] * 4, s.median),
                fraction_of_limit=None,
                ours_over_theirs=r["ours_over_theirs"],
                process="THP subprocess",
            )
        )
    return rows


def kernel_sizes(cfg: Config) -> list[int]:
    return (
        [1_000, 100_000, 1_000_000]
        if cfg.quick
        else [1_000, 10_000, 100_000, 1_000_000, 16_000_000, 64_000_000]
    )


def threads_of(impl: str, pool_t: int, torch_t: int) -> int:
    """The threads an implementation runs on: the bridge on core's pool,
    numpy's ufuncs on one, everything torch on torch's."""
    if impl.startswith("bridge"):
        return pool_t
    if impl.startswith("numpy"):
        return 1
    return torch_t


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
    have_limit = stream_lib.available()
    if not have_limit:
        cfg.log('kernels: no compiled limit here (see the stream section); no "of limit" figures')
    cache_list = limit.caches()
    pool_t, torch_t = (stream_lib.default_threads() if have_limit else 0), torch.get_num_threads()
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
            "torch op out=": lambda: ops.scale_shift.out(xt, ALPHA, BETA, out=outt),
            "numpy": lambda: ALPHA * x + BETA,
            "numpy out=": lambda: np.add(np.multiply(x, ALPHA, out=out), BETA, out=out),
            "torch eager": lambda: ALPHA * xt + BETA,
            "torch eager out=": lambda: torch.mul(xt, ALPHA, out=outt).add_(BETA),
        }
        add = {
            "bridge out=": lambda: tb.add(x, y, out=out),
            "bridge": lambda: tb.add(x, y),
            "torch add_out": lambda: ops.add_out(xt, yt, outt),
            "torch op": lambda: ops.custom_add(xt, yt),
            "numpy": lambda: x + y,
            "numpy out=": lambda: np.add(x, y, out=out),
            "torch eager": lambda: xt + yt,
            "torch add out=": lambda: torch.add(xt, yt, out=outt),
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
        streams: dict[int, stream_lib.Stream] = {}
        if have_limit:
            wanted = {threads_of(i, pool_t, torch_t) for i in [*ss, *add]}
            streams = {t: stream_lib.Stream(n, t) for t in sorted(wanted)}
        stores = [st for st in limit.STORES if streams and next(iter(streams.values())).has(st)]
        for op, impls, arrays, k in (("scale_shift", ss, 2, "scale"), ("add", add, 3, "add")):
            kind = limit.regime([n * 4] * arrays, cache_list)
            compiled = stream.limit_impls(streams, [k], stores)
            # A bandwidth flip between the limit's samples and an op's (a figure above the limit)
            # is measured again, as in the stream section, rather than failing the session.
            for _ in range(stream.REMEASURE + 1):
                samples = interleaved({**impls, **compiled}, reps, inner)
                lims = {t: stream.limit_samples(samples, k, t, stores) for t in streams}
                if not any(
                    limit.is_error(limit.fraction(lims[t], s.seconds), kind)
                    for impl, s in samples.items()
                    if impl not in compiled and (t := threads_of(impl, pool_t, torch_t)) in lims
                ):
                    break
                cfg.log(f"kernels: n={n:,} {op}: a figure above {limit.ERROR} x its limit: measuring again")
            for impl, s in samples.items():
                t = (
                    int(impl.rsplit(", ", 1)[1][:-2])
                    if impl in compiled
                    else threads_of(impl, pool_t, torch_t)
                )
                rows.append(
                    row(
                        "kernels",
                        s,
                        op=op,
                        impl=impl,
                        dtype="float32",
                        n=n,
                        gbs=gbs(arrays * n * 4, s.median),
                        threads=t,
                        fraction_of_limit=(
                            limit.fraction(lims[t], s.seconds) if t in lims and impl not in compiled else None
                        ),
                        limit_kind=kind,
                        compile_s=compile_s.get(op) if impl == "torch.compile" else None,
                    )
                )
            for t, lim in lims.items():
                s = Samples(lim)
                rows.append(
                    row("kernels", s, op=op, impl=f"STREAM {k} limit ({t}T)", dtype="float32", n=n,
                        gbs=gbs(arrays * n * 4, s.median), threads=t, fraction_of_limit=None, limit_kind=kind)
                )  # fmt: skip
        for st in streams.values():
            st.close()
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
    big = [n for n in kernel_sizes(cfg) if n >= 1_000_000]
    cfg.log(f"kernels: torch peers with huge pages (THP subprocess), n = {big}")
    rows += _thp_peers(cfg, big)
    return rows


# Who is compared with whom in the speedup table: allocating with allocating,
# out= with out=.
PEERS = {
    "bridge": ("numpy", "torch eager", "torch eager (THP)", "torch.compile", "torch.compile (THP)"),
    "torch op": ("numpy", "torch eager", "torch eager (THP)", "torch.compile", "torch.compile (THP)"),
    "bridge out=": ("numpy out=", "torch eager out=", "torch add out="),
    "torch op out=": ("numpy out=", "torch eager out="),
    "torch add_out": ("numpy out=", "torch add out="),
}


def markdown(results: dict) -> list[str]:
    k = timed_rows(results, "kernels")
    out = [
        table(
            ["op", "n", "impl", "dtype", "threads", "time", "GB/s", "of limit"],
            [
                [
                    r["op"],
                    f"{r['n']:,}",
                    r["impl"],
                    r["dtype"],
                    r.get("threads", "—"),
                    timed(r),
                    f"{r['gbs']:.1f}",
                    limit.fmt_fraction(r.get("fraction_of_limit"), r.get("limit_kind")),
                ]
                for r in k
            ],
        ),
        "",
        '"of limit": bandwidth over the compiled STREAM kernel\'s at the same size and thread count (the '
        "faster store form, paired per repetition; the `STREAM ... limit` rows). Unlabelled: beyond the "
        "caches, the memory's limit; labelled (L1, L2, L3, mixed): the same kernel's bandwidth at that "
        "size, where the arrays are not all >= 4 x the last-level cache.",
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
        if r["impl"] in PEERS and r["dtype"] == "float32":
            alts = {
                a["impl"]: a for a in k if a["op"] == r["op"] and a["n"] == r["n"] and a["dtype"] == "float32"
            }
            cells = []
            for peer in PEERS[r["impl"]]:
                if peer not in alts:
                    continue
                # THP peers ran in their own process, beside the torch op: their
                # ratio is paired there; others are medians from this process.
                ratio = (
                    alts[peer]["ours_over_theirs"]
                    if "ours_over_theirs" in alts[peer] and r["impl"] == "torch op"
                    else alts[peer]["median_s"] / r["median_s"]
                )
                cells.append(f"{peer}: {ratio:.2f}x")
            speed.append([r["op"], f"{r['n']:,}", r["impl"], "; ".join(cells) or "—"])
    threads = results.get("machine", {}).get("torch_threads", "?")
    out += [
        "",
        "Speedup of ours vs each alternative (>1 = ours faster; allocating vs allocating, out= vs out=):",
        "",
        table(["op", "n", "ours", "vs"], speed),
        "",
        f"Threads: numpy 1 (its ufuncs are single-threaded); torch (eager, compile, the tierkit torch op) "
        f"{threads} (torch.get_num_threads()); the bridge's pool: every CPU it may use (affinity, cgroup quota).",
    ]
    return out


def targets(results: dict) -> list[dict]:
    out = []
    k = timed_rows(results, "kernels")
    big = [n for n in {r["n"] for r in k} if n >= 16_000_000]

    # Bandwidth into a preallocated output vs the compiled limit beyond the
    # caches, same repetitions: the kernels rows at such sizes, and the
    # stream section's, which measures the out= ops beside its kernels.
    for op, impl, kern in (("scale_shift", "bridge out=", "scale"), ("add", "torch add_out", "add")):
        name = f"{impl} {op} >= 0.9 x the compiled STREAM {kern} limit beyond the caches"
        found = [
            (r["n"], r["gbs"], r["fraction_of_limit"])
            for r in pick(k, op=op, impl=impl, dtype="float32", limit_kind="memory")
            if r.get("fraction_of_limit") is not None
        ]
        found += [
            (r["n"], r["gbs"], r["of_limit"])
            for r in timed_rows(results, "stream")
            if r.get("op") == op and r.get("impl", "").startswith(impl) and r.get("regime") == "memory"
        ]
        if not found:
            out.append(
                not_measured(name, 0.9, "no size beyond the caches measured against the compiled limit")
            )
            continue
        errors = [f for f in found if limit.is_error(f[2])]
        worst = max(errors, key=lambda f: f[2]) if errors else min(found, key=lambda f: f[2])
        detail = "; ".join(f"n={n:.3g}: {g:.1f} GB/s ({limit.fmt_fraction(f)})" for n, g, f in sorted(found))
        t = target(name, 0.9, round(worst[2], 3), not errors and worst[2] >= 0.9, detail)
        if errors:
            t["error"] = True
        out.append(t)

    # The allocating torch op vs eager, numpy, and torch.compile with torch's
    # huge pages (the fair peer: the same page-fault policy as ours).
    for alt, factor in (("torch eager", 1.5), ("numpy", 1.5), ("torch.compile (THP)", 1.0)):
        verb = f">= {factor}x faster than" if factor > 1 else "not slower than"
        name = f"torch op scale_shift (allocating) {verb} {alt} at >= 1.6e7"
        pairs = []
        for n in big:
            ours = pick(k, op="scale_shift", impl="torch op", n=n, dtype="float32")
            theirs = pick(k, op="scale_shift", impl=alt, n=n, dtype="float32")
            if ours and theirs:
                paired = theirs[0].get("ours_over_theirs")  # measured beside the op, same process
                pairs.append(
                    (n, paired if paired is not None else theirs[0]["median_s"] / ours[0]["median_s"])
                )
        if not pairs:
            out.append(not_measured(name, factor, f"{alt} not measured at >= 1.6e7 in this run"))
            continue
        worst = min(p for _, p in pairs)
        out.append(
            target(
                name,
                factor,
                round(worst, 2),
                worst >= factor,
                "; ".join(f"n={n:.3g}: {p:.2f}x" for n, p in pairs),
            )
        )
    return out


def plots(results: dict, out_dir: str, plt, save) -> list[str]:
    sec = results["sections"]
    made = []
    k = [r for r in sec.get("kernels", {}).get("rows", []) if "median_s" in r and r["dtype"] == "float32"]
    stream = {
        (r["kernel"], r["threads"]): r["gbs"]
        for r in sec.get("stream", {}).get("rows", [])
        if "gbs" in r and r.get("impl") == "limit"
    }
    k = [r for r in k if "(ordinary stores" not in r["impl"] and "(non-temporal stores" not in r["impl"]]
    if k:
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        for ax, op, ref in ((axes[0], "scale_shift", "scale"), (axes[1], "add", "add")):
            for impl in sorted({r["impl"] for r in k if r["op"] == op}):
                pts = sorted((r["n"], r["gbs"]) for r in k if r["op"] == op and r["impl"] == impl)
                ax.plot(
                    *zip(*pts),
                    marker="o",
                    label=impl,
                    color=color_of(impl),
                    linestyle="--" if impl.startswith("STREAM") or "THP" in impl else "-",
                )
            for (kern, threads), gbs in stream.items():
                if kern == ref:
                    ax.axhline(
                        gbs,
                        color="grey",
                        linestyle=":",
                        label=f"STREAM {ref} limit beyond the caches, {threads}T",
                    )
            ax.set_xscale("log")
            ax.set_xlabel("elements (float32)")
            ax.set_ylabel("GB/s (bytes moved / time)")
            ax.set_title(op)
            ax.legend(fontsize=7)
        fig.tight_layout()
        made.append(save(fig, "kernels_gbs.png"))
        plt.close(fig)
    return made
