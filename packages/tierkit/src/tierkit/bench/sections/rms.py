"""12. rms_norm: forward, forward + backward and the fused residual form,
against eager F.rms_norm, torch.compile and the compiled copy loop."""

from __future__ import annotations

import json
import textwrap

from ._common import Config, Skip, need, pick, table, target, thp_probe_rows, timed, timed_rows

TITLE = "rms_norm: against eager, torch.compile and the compiled copy limit"

# One process with THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up), so
# eager's and compile's large outputs get huge pages as the tierkit op's do.
PROBE = textwrap.dedent("""
    import json, sys
    import torch, tierkit_torch
    import torch.nn.functional as F
    from tierkit.bench import stream_lib
    from tierkit.bench.timing import inner_for, interleaved, paired_ratio
    reps, shapes, with_compile = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"
    ops = torch.ops.tierkit
    rows = []
    for rows_, d in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(rows_, d, generator=g).to(dtype)
            r = torch.randn(rows_, d, generator=g).to(dtype)
            w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
            dy = torch.randn(rows_, d, generator=g).to(dtype)
            h = torch.empty_like(x)
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            comp = torch.compile(lambda a, b: F.rms_norm(a, (d,), b, 1e-6)) if with_compile else None

            def both(fn):
                def run():
                    return torch.autograd.grad(fn(xg, wg), (xg, wg), dy)
                return run

            if comp is not None:
                comp(x, w); comp(xg, wg).backward(dy)
            impls = {
                "torch op fwd": lambda: ops.rms_norm(x, w, 1e-6),
                "torch eager fwd (THP)": lambda: F.rms_norm(x, (d,), w, 1e-6),
                "torch.compile fwd (THP)": (lambda: comp(x, w)) if comp else None,
                "torch op fwd+bwd": both(lambda a, b: ops.rms_norm(a, b, 1e-6)),
                "torch eager fwd+bwd (THP)": both(lambda a, b: F.rms_norm(a, (d,), b, 1e-6)),
                "torch.compile fwd+bwd (THP)": both(comp) if comp else None,
                "torch op add_rms_norm": lambda: ops.add_rms_norm(x, r, w, 1e-6),
                # Warm memory on both sides (the op's outputs come from tierkit's cache): h
                # written into a tensor made once, so page faults do not decide the ratio.
                "x + r (into a preallocated h), then torch op rms_norm": lambda: (
                    ops.rms_norm(torch.add(x, r, out=h), w, 1e-6), h),
            }
            impls = {k: v for k, v in impls.items() if v is not None}  # --quick: no compile peers
            refs = {"fwd": "torch op fwd", "fwd+bwd": "torch op fwd+bwd", "add": "torch op add_rms_norm"}
            limit = None
            if stream_lib.available():
                # x read and y written: the bytes of a copy of x.
                stream = stream_lib.Stream(rows_ * d * x.element_size() // 4, torch.get_num_threads())
                limit = "STREAM copy"
                impls[limit] = stream.timer("copy", "ordinary")
            s = interleaved(impls, reps, inner_for(rows_ * d * x.element_size() * 2 / 10e9), warmup=1)
            for impl, t in s.items():
                kind = "add" if "add_rms" in impl or impl.startswith("x + r") else ("fwd+bwd" if "bwd" in impl else "fwd")
                row = {"impl": impl, "nrows": rows_, "d": d, "dtype": str(dtype).removeprefix("torch."),
                       "seconds": t.seconds, "gbs": rows_ * d * x.element_size() * 2 / t.median / 1e9}
                if impl != limit:
                    row["ours_over_theirs"] = paired_ratio(t, s[refs[kind]])
                    if limit and impl == "torch op fwd":
                        row["of_limit"] = paired_ratio(s[limit], t)
                rows.append(row)
    print(json.dumps(rows))
""")


def shapes(cfg: Config) -> list[list[int]]:
    return [[1024, 1024]] if cfg.quick else [[4096, 4096], [16384, 1024]]


def measure(cfg: Config) -> list[dict]:
    torch = need("torch")
    need("tierkit_torch")
    if not hasattr(torch.ops.tierkit, "rms_norm"):
        raise Skip("this tierkit_torch has no rms_norm")
    # --quick: no torch.compile peers (~10 s a graph; --quick measures no target's shape)
    args = [str(cfg.reps), json.dumps(shapes(cfg)), "0" if cfg.quick else "1"]
    return thp_probe_rows("rms", PROBE, args, "rms_norm", timeout=3600)


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "rms")
    return [
        table(
            [
                "impl",
                "shape",
                "dtype",
                "time",
                "GB/s (x and y)",
                "tierkit's speed-up over it",
                "of the copy limit",
            ],
            [
                [
                    r["impl"],
                    f"[{r['nrows']}, {r['d']}]",
                    r["dtype"],
                    timed(r),
                    f"{r['gbs']:.1f}",
                    "—"
                    if "ours_over_theirs" not in r or r["impl"].startswith("torch op")
                    else f"{r['ours_over_theirs']:.2f}x",
                    f"{r['of_limit']:.2f}" if "of_limit" in r else "",
                ]
                for r in rows
            ],
        ),
        "",
        "Speed-ups are paired per repetition against the tierkit op doing the same work (forward, "
        "forward + backward, or the residual form); all in one process with THP_MEM_ALLOC_ENABLE=1 and "
        "torch's thread count; eps 1e-6 and a weight throughout.",
    ]


def targets(results: dict) -> list[dict]:
    rows = timed_rows(results, "rms")
    out = []
    for rows_, d in ([4096, 4096], [16384, 1024]):
        for dtype in ("float32", "bfloat16"):
            where = f"[{rows_}, {d}] {dtype}"
            for peer, factor in (
                ("torch eager fwd (THP)", 8.0),
                ("torch.compile fwd (THP)", 3.0),
                ("torch.compile fwd+bwd (THP)", 2.0),
                ("x + r (into a preallocated h), then torch op rms_norm", 1.2),
            ):
                r = pick(rows, impl=peer, nrows=rows_, d=d, dtype=dtype)
                limit = pick(rows, impl="STREAM copy", nrows=rows_, d=d, dtype=dtype)
                if r:
                    ratio = round(r[0]["ours_over_theirs"], 2)
                    # A forward moves a copy's bytes: no forward beats the copy loop's time.
                    detail = (
                        f"the copy limit allows at most {r[0]['median_s'] / limit[0]['median_s']:.1f}x"
                        if limit and "fwd+bwd" not in peer and "fwd" in peer
                        else ""
                    )
                    out.append(
                        target(
                            f"rms_norm vs {peer} >= {factor}x, {where}",
                            factor,
                            ratio,
                            ratio >= factor,
                            detail,
                        )
                    )
            r = pick(rows, impl="torch op fwd", nrows=rows_, d=d, dtype=dtype)
            if r and "of_limit" in r[0]:
                frac = round(r[0]["of_limit"], 2)
                out.append(
                    target(
                        f"rms_norm forward >= 0.8 x the copy limit's bandwidth, {where}",
                        0.8,
                        frac,
                        frac >= 0.8,
                    )
                )
    return out
