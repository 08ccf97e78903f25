"""11. The gated activations, silu_mul (SwiGLU) and gelu_tanh_mul (GeGLU), against eager,
torch.compile and numpy, and their accuracy."""

from __future__ import annotations

import json
import textwrap

from ._common import (
    PROBE_HEAD,
    Config,
    Skip,
    need,
    not_measured,
    pick,
    table,
    target,
    thp_probe_rows,
    timed,
    timed_rows,
)
from ._copy_limit import ROOF_COLUMNS, roof_cells, roof_target

TITLE = "Gated activations: silu_mul and gelu_tanh_mul against eager, torch.compile and numpy"

# In a subprocess with THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up):
# eager's and torch.compile's large outputs get huge pages, as the tierkit
# op's do (it advises them itself), so page faults do not decide it.
PROBE = PROBE_HEAD + textwrap.dedent("""
    import numpy as np, tierkit_bridge as tb
    import torch.nn.functional as F
    sizes = cases
    K = np.longdouble(2) * np.sqrt(np.longdouble(2) / np.longdouble(np.pi))
    # Each gate: eager torch's expression, numpy's, and the exact value in
    # x87 extended precision (numpy's longdouble: 64-bit mantissa).
    GATES = {
        "silu_mul": (lambda a, b: F.silu(a) * b, lambda a, b: a / (1 + np.exp(-a)) * b,
                     lambda a, b: a / (1 + np.exp(-a)) * b),
        "gelu_tanh_mul": (lambda a, b: F.gelu(a, approximate="tanh") * b,
                          lambda a, b: 0.5 * a * (1 + np.tanh(0.7978845608028654 * (a + 0.044715 * a**3))) * b,
                          lambda a, b: a / (1 + np.exp(-K * (a + np.longdouble(0.044715) * a**3))) * b),
    }
    rows = []
    for op, (eager, numpy_expr, exact_expr) in GATES.items():
        if not hasattr(torch.ops.tierkit, op):
            continue
        ours = getattr(torch.ops.tierkit, op)
        compiled = torch.compile(eager, dynamic=True) if with_compile else None
        for n in sizes:
            for dtype in (torch.float32, torch.bfloat16):
                g = torch.Generator().manual_seed(0)
                a = (torch.randn(n, generator=g) * 4).to(dtype)
                b = torch.randn(n, generator=g).to(dtype)
                impls = {"torch op": lambda: ours(a, b), "torch eager (THP)": lambda: eager(a, b)}
                if compiled is not None:
                    compiled(a, b)
                    impls["torch.compile (THP)"] = lambda: compiled(a, b)
                if dtype == torch.float32:
                    an, bn = a.numpy(), b.numpy()
                    impls["bridge"] = lambda: getattr(tb, op)(an, bn)
                    impls["numpy"] = lambda: numpy_expr(an, bn)
                limit = None
                if stream_lib.available():
                    # a and b read, the result written: a copy moving the same bytes (3n elements).
                    stream = stream_lib.Stream(3 * n * a.element_size() // 8, torch.get_num_threads())
                    limit = "STREAM copy"
                    impls[limit] = stream.timer("copy", "fastest")
                s = interleaved(impls, reps, inner_for(n * 3 * a.element_size() / 10e9), best_of=stream_lib.BEST_OF)
                compute = None
                if limit:  # the compute roof: slices of a and b in a core's caches, per element
                    k_of = lambda nbytes: min(n, nbytes // a.element_size())
                    per = in_cache_seconds_per_unit(lambda k: lambda: ours(a[:k], b[:k]), k_of(64 << 10),
                                                    k_of(256 << 10), reps, s["torch op"].median,
                                                    n / torch.get_num_threads())
                    compute = per and per * n / torch.get_num_threads()
                for impl, x in s.items():
                    if impl == limit:
                        continue
                    ref = "bridge" if impl == "numpy" else "torch op"
                    row = {"op": op, "impl": impl, "n": n, "dtype": str(dtype).removeprefix("torch."),
                           "seconds": x.seconds, "ours_over_theirs": paired_ratio(x, s[ref])}
                    if limit and impl == "torch op":
                        row["of_limit"] = paired_ratio(s[limit], x)
                    if limit and impl == "torch op" and compute:
                        row.update(roof_fields(s[limit].median, compute, x.median, row["of_limit"]))
                    rows.append(row)
        # Accuracy: the largest error over 2**20 inputs, per dtype, against the exact value.
        g = torch.Generator().manual_seed(1)
        a64 = torch.randn(1 << 20, generator=g, dtype=torch.float64) * 8
        b64 = torch.randn(1 << 20, generator=g, dtype=torch.float64)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            a, b = a64.to(dtype), b64.to(dtype)
            al, bl = a.double().numpy().astype(np.longdouble), b.double().numpy().astype(np.longdouble)
            with np.errstate(over="ignore"):
                exact = exact_expr(al, bl)
            ulp = float(torch.finfo(dtype).eps)
            # Not near underflow (|exact| >= tiny / eps), where even a correctly
            # rounded result loses relative digits: both give 0 where exp(-z) overflows.
            keep = np.abs(exact) >= float(torch.finfo(dtype).tiny) / ulp
            err = {}
            for impl, y in (("torch op", ours(a, b)), ("torch eager", eager(a, b))):
                e = np.abs(y.double().numpy().astype(np.longdouble) - exact)[keep]
                err[impl] = {"abs": float(e.max()), "ulp": float((e / np.abs(exact[keep])).max()) / ulp}
            rows.append({"op": op, "impl": "accuracy", "dtype": str(dtype).removeprefix("torch."), **{
                f"{k}_{m}": v[m] for k, v in err.items() for m in ("abs", "ulp")}})
    print(json.dumps(rows))
""")


def sizes(cfg: Config) -> list[int]:
    return [1_000_000] if cfg.quick else [1_000_000, 16_000_000]


def measure(cfg: Config) -> list[dict]:
    need("numpy")
    torch = need("torch")
    need("tierkit_torch")
    need("tierkit_bridge")
    if not hasattr(torch.ops.tierkit, "silu_mul"):
        raise Skip("this tierkit_torch has no silu_mul")  # gelu_tanh_mul is measured where it exists
    args = [str(cfg.reps), json.dumps(sizes(cfg)), "0" if cfg.quick else "1"]
    return thp_probe_rows("silu", PROBE, args, "silu_mul")


OPS = ("silu_mul", "gelu_tanh_mul")
EAGER = {"silu_mul": "F.silu(a) * b", "gelu_tanh_mul": 'F.gelu(a, approximate="tanh") * b'}


def _of(op: str, rows: list[dict]) -> list[dict]:
    # Results from before gelu_tanh_mul joined the section carry no "op": silu_mul's.
    return [r for r in rows if r.get("op", "silu_mul") == op]


def markdown(results: dict) -> list[str]:
    timed_all = timed_rows(results, "silu")
    acc_all = [r for r in results["sections"].get("silu", {}).get("rows", []) if r.get("impl") == "accuracy"]
    lines = []
    for op in OPS:
        rows, acc = _of(op, timed_all), _of(op, acc_all)
        if not rows and not acc:
            continue
        lines += [
            f"**{op}** (eager: `{EAGER[op]}`)",
            "",
            table(
                [
                    "impl",
                    "dtype",
                    "n",
                    "time",
                    "tierkit's speed-up over it",
                    "of the copy limit",
                    *ROOF_COLUMNS,
                ],
                [
                    [
                        r["impl"],
                        r["dtype"],
                        f"{r['n']:,}",
                        timed(r),
                        f"{r['ours_over_theirs']:.2f}x",
                        "",
                        "",
                        "",
                    ]
                    for r in rows
                    if r["impl"] not in ("torch op", "bridge")
                ]
                + [
                    [
                        r["impl"],
                        r["dtype"],
                        f"{r['n']:,}",
                        timed(r),
                        "—",
                        f"{r['of_limit']:.2f}" if "of_limit" in r else "",
                        *roof_cells(r),
                    ]
                    for r in rows
                    if r["impl"] in ("torch op", "bridge")
                ],
            ),
            "",
            table(
                ["dtype", "torch op: max error (ulp, abs)", "eager: max error (ulp, abs)"],
                [
                    [
                        r["dtype"],
                        f"{r['torch op_ulp']:.3f}, {r['torch op_abs']:.3g}",
                        f"{r['torch eager_ulp']:.3f}, {r['torch eager_abs']:.3g}",
                    ]
                    for r in acc
                ],
            ),
            "",
        ]
    return lines + [
        "Speed-ups: the torch op's over the torch peers, the bridge's over numpy's own expression "
        "of the same formula, paired per repetition; all in one process with THP_MEM_ALLOC_ENABLE=1. "
        "Errors against the exact value (x87 extended precision) over 2^20 inputs (a ~ N(0, 64), "
        "b ~ N(0, 1)), relative to |exact| in the dtype's ulps, where |exact| >= tiny / eps.",
    ]


def targets(results: dict) -> list[dict]:
    out = []
    for op in OPS:
        out += _targets(op, results)
    return out


def _targets(op: str, results: dict) -> list[dict]:
    rows = _of(op, timed_rows(results, "silu"))
    out = []
    for n in (1_000_000, 16_000_000):
        for dtype in ("float32", "bfloat16"):
            for peer, factor in (("torch eager (THP)", 2.0), ("torch.compile (THP)", 1.0)):
                name = f"torch op {op} >= {factor} x {peer} at n={n:.2g}, {dtype}"
                r = pick(rows, impl=peer, n=n, dtype=dtype)
                if r:
                    ratio = round(r[0]["ours_over_theirs"], 2)
                    out.append(target(name, factor, ratio, ratio >= factor))
                elif "compile" in peer and results["quick"] and pick(rows, n=n, dtype=dtype):
                    out.append(not_measured(name, factor, "--quick compiles no torch.compile peer"))
            r = pick(rows, impl="torch op", n=n, dtype=dtype)
            if n >= 16_000_000 and r and "of_limit" in r[0]:  # beyond the caches
                # float32 0.8; bfloat16 0.7 (its lanes widen and narrow: the performance issue's goal)
                out.append(
                    roof_target(
                        f"torch op {op}", 0.8 if dtype == "float32" else 0.7, r[0], f"n={n:.2g}, {dtype}"
                    )
                )
        r = pick(rows, impl="numpy", n=n, dtype="float32")
        if r:
            ratio = round(r[0]["ours_over_theirs"], 2)
            out.append(target(f"bridge {op} >= 2.0 x numpy at n={n:.2g}, float32", 2.0, ratio, ratio >= 2.0))
    acc = _of(
        op, [r for r in results["sections"].get("silu", {}).get("rows", []) if r.get("impl") == "accuracy"]
    )
    for r in acc:
        limit = r["torch eager_ulp"] + 1
        out.append(
            target(
                f"{op} max error <= eager's + 1 ulp, {r['dtype']}",
                round(limit, 3),
                round(r["torch op_ulp"], 3),
                r["torch op_ulp"] <= limit,
            )
        )
    return out
