"""12. The row reductions, every ROW_REDUCTIONS entry of the op table
(forward, forward + backward, and the fused residual form where the entry
has one), against eager F.<name> (torch.<name>(x, -1) along a dim), torch.compile, onnxruntime's CPU kernels
(where installed: ort_peer.py) and the compiled copy loop: a new entry is
measured here with no new code (a new ONNX peer is a line in ort_peer.py)."""

from __future__ import annotations

import textwrap

from ._common import PROBE_HEAD, Config, in_case, pick, target, timed_rows
from ._copy_limit import limit_table, measure_entries, roof_target

TITLE = "Row reductions: against eager, torch.compile and the compiled copy limit"

# One process with THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up), so
# eager's and compile's large outputs get huge pages as the tierkit op's do.
PROBE = PROBE_HEAD + textwrap.dedent("""
    import torch.nn.functional as F
    from tierkit_core.op_table import ROW_REDUCTIONS
    from tierkit.bench import ort_peer
    shapes = cases
    # Passes over memory, in arrays of x's size: forward reads x, writes y; the fused add reads x and r,
    # writes y and h; forward + backward adds dy and x read, dx written (rstd and the weights: a row's
    # worth). The copy limit moves 2.
    PASSES = {"fwd": 2, "add": 4, "fwd+bwd": 5}
    ops = torch.ops.tierkit
    EPS = 1e-6
    def _rstd(a):
        return torch.rsqrt(a.float().pow(2).mean(-1, keepdim=True) + EPS)
    # The models' own norms (transformers' LlamaRMSNorm and GemmaRMSNorm forward), for the casting modes.
    CAST = {
        "llama": lambda a, w: w * (a.float() * _rstd(a)).to(a.dtype),
        "gemma": lambda a, w: ((a.float() * _rstd(a)) * (1.0 + w.float())).to(a.dtype),
    }
    rows = []
    for entry in ROW_REDUCTIONS:
        name = entry.name
        op = getattr(ops, name)
        if entry.has_dim:  # along the last dim: torch.<name>(x, -1)
            aten = lambda a, _shape, *q, _n=name: getattr(torch, _n)(a, -1)
        else:
            aten = getattr(F, name)  # torch.nn.functional.<name>(x, (d,), *params, eps)
        LAST = entry.trailing(EPS)  # the op's last argument: its dim (-1), or eps
        for case in shapes:
            rows_, d = case[:2]
            # The width sweep (goal 3, rows of any width): the forward in float32 beside the copy limit only.
            sweep = case[2:] == ["widths"]
            peers = with_compile and not sweep
            for dtype in (torch.float32,) if sweep else (torch.float32, torch.bfloat16):
                if not wanted(op=name, nrows=rows_, d=d, dtype=str(dtype).removeprefix("torch.")):
                    continue
                case_start = time.perf_counter()  # the case's seconds: what measuring it again costs (settle.py)
                g = torch.Generator().manual_seed(0)
                x = torch.randn(rows_, d, generator=g).to(dtype)
                r = torch.randn(rows_, d, generator=g).to(dtype)
                ps = [(float(p == "weight") + 0.1 * torch.randn(d, generator=g)).to(dtype) for p in entry.params]
                dy = torch.randn(rows_, d, generator=g).to(dtype)
                h = torch.empty_like(x)
                xg = x.clone().requires_grad_()
                pg = [p.clone().requires_grad_() for p in ps]
                comp = torch.compile(lambda a, *q: aten(a, (d,), *q, EPS)) if peers else None

                def both(fn):
                    def run():
                        return torch.autograd.grad(fn(xg, *pg), (xg, *pg), dy)
                    return run

                if comp is not None:
                    comp(x, *ps); comp(xg, *pg).backward(dy)
                impls = {
                    "torch op fwd": lambda: op(x, *ps, LAST),
                    "torch eager fwd (THP)": lambda: aten(x, (d,), *ps, EPS),
                    "torch.compile fwd (THP)": (lambda: comp(x, *ps)) if comp else None,
                    "torch op fwd+bwd": both(lambda a, *q: op(a, *q, LAST)),
                    "torch eager fwd+bwd (THP)": both(lambda a, *q: aten(a, (d,), *q, EPS)),
                    "torch.compile fwd+bwd (THP)": both(comp) if comp else None,
                }
                if entry.fused_add:
                    add = getattr(ops, entry.add_name)
                    impls["torch op fused add"] = lambda: add(x, r, *ps, EPS)
                    # Warm memory on both sides (the op's outputs come from tierkit's cache): h
                    # written into a tensor made once, so page faults do not decide the ratio.
                    impls["x + r (into a preallocated h), then torch op"] = lambda: (
                        op(torch.add(x, r, out=h), *ps, EPS), h)
                # The forward kinds on k rows (slices of the same operands), for the compute roof.
                at = {"torch op fwd": lambda k: lambda: op(x[:k], *ps, LAST)}
                if entry.fused_add:
                    at["torch op fused add"] = lambda k: lambda: add(x[:k], r[:k], *ps, EPS)
                refs = {"fwd": "torch op fwd", "fwd+bwd": "torch op fwd+bwd", "add": "torch op fused add"}
                if entry.casting:  # each mode against "aten" (its cost), and against the models' own code
                    for mode, offset in (("llama", 0.0), ("gemma", 1.0)):
                        mine = f"torch op fwd, casting_mode={mode}"
                        impls[mine] = (lambda m=mode, o=offset: op(x, *ps, EPS, offset=o, casting_mode=m))
                        at[mine] = lambda k, m=mode, o=offset: lambda: op(x[:k], *ps, EPS, offset=o, casting_mode=m)
                        refs[mine] = "torch op fwd"
                        hf = CAST[mode]
                        impls[f"HF {mode} eager (THP)"] = lambda hf=hf: hf(x, ps[0])
                        refs[f"HF {mode} eager (THP)"] = mine
                        if peers:
                            c = torch.compile(hf)
                            c(x, ps[0])
                            impls[f"HF {mode} torch.compile (THP)"] = lambda c=c: c(x, ps[0])
                            refs[f"HF {mode} torch.compile (THP)"] = mine
                if sweep:
                    impls, at = {"torch op fwd": impls["torch op fwd"]}, {"torch op fwd": at["torch op fwd"]}
                elif ort_peer.available():
                    # onnxruntime's kernels, outputs bound to preallocated tensors; checked against ours
                    # once, so a wrong peer is not a fast one.
                    threads = torch.get_num_threads()
                    got = ort_peer.plain(name, x, ps, EPS, threads)
                    if got:
                        got[0]()
                        torch.testing.assert_close(got[1], op(x, *ps, LAST), rtol=2e-2, atol=2e-2)
                        impls["onnxruntime fwd"] = got[0]
                    got = ort_peer.fused(name, x, r, ps, EPS, threads) if entry.fused_add else None
                    if got:
                        got[0]()
                        want = getattr(ops, entry.add_name)(x, r, *ps, EPS)
                        torch.testing.assert_close(got[1], want[0], rtol=2e-2, atol=2e-2)
                        torch.testing.assert_close(got[2], want[1], rtol=2e-2, atol=2e-2)
                        impls["onnxruntime fused add"] = got[0]
                impls = {k: v for k, v in impls.items() if v is not None}  # --quick: no compile peers
                limit = None
                if stream_lib.available():
                    # x read and y written: the bytes of a copy of x.
                    stream = stream_lib.Stream(rows_ * d * x.element_size() // 4, torch.get_num_threads())
                    limit = "STREAM copy"
                    impls[limit] = stream.timer("copy", "fastest")
                s = interleaved(impls, reps, inner_for(rows_ * d * x.element_size() * 2 / 10e9), warmup=1,
                                best_of=stream_lib.BEST_OF)
                # Each forward kind's in-cache time for all rows_ on every thread: x of 64 and 256 KiB a
                # thread (its rows and outputs in a core's own caches), the difference per row.
                threads = torch.get_num_threads()
                k_of = lambda nbytes: max(1, nbytes // (d * x.element_size()))
                compute = {}
                for impl, f in at.items() if limit else ():
                    per_row = in_cache_seconds_per_unit(f, k_of(64 << 10), min(rows_, k_of(256 << 10)), reps,
                                                        s[impl].median, rows_ / threads)
                    if per_row:
                        compute[impl] = per_row * rows_ / threads
                case_seconds = time.perf_counter() - case_start
                for impl, t in s.items():
                    kind = "add" if "add" in impl or impl.startswith("x + r") else ("fwd+bwd" if "bwd" in impl else "fwd")
                    row = {"op": name, "impl": impl, "nrows": rows_, "d": d,
                           "dtype": str(dtype).removeprefix("torch."), "seconds": t.seconds,
                           "gbs": rows_ * d * x.element_size() * 2 / t.median / 1e9, "case_seconds": case_seconds}
                    if impl != limit:
                        row["ours_over_theirs"] = paired_ratio(t, s[refs.get(impl, refs[kind])])
                        if limit and impl.startswith("torch op"):
                            row["passes"] = PASSES[kind]
                            row["of_limit"] = paired_ratio(s[limit], t) * PASSES[kind] / 2
                            if impl in compute:  # the roof: the lower of memory's and the op's in-cache speed
                                row.update(roof_fields(s[limit].median * PASSES[kind] / 2, compute[impl], t.median,
                                                       row["of_limit"]))
                    rows.append(row)
    print(json.dumps(rows))
""")


# The shapes every peer is measured at; the width sweep adds d = 2048 and 8192
# at the same 2^24 elements (float32 forward only: goal 3 of the performance issue).
SHAPES = ([4096, 4096], [16384, 1024])
WIDTHS = ([8192, 2048], [2048, 8192])
# What one measurement shares (its peers are paired with it): settle.py measures a case again alone.
CASE_FIELDS = ("op", "nrows", "d", "dtype")


def shapes(cfg: Config) -> list[list]:
    return [[1024, 1024]] if cfg.quick else [*map(list, SHAPES), *([*s, "widths"] for s in WIDTHS)]


def measure(cfg: Config) -> list[dict]:
    from tierkit_core.op_table import ROW_REDUCTIONS

    return measure_entries(cfg, "rows", PROBE, "row reductions", ROW_REDUCTIONS, shapes(cfg))


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "rows")
    return [
        limit_table(
            rows,
            ("shape", lambda r: f"[{r['nrows']}, {r['d']}]"),
            "x and y",
            ("torch op fwd", "torch op fwd+bwd", "torch op fused add"),
        ),
        "",
        "Speed-ups are paired per repetition against the tierkit op doing the same work (forward, "
        "forward + backward, or the fused residual form); all in one process with THP_MEM_ALLOC_ENABLE=1 and "
        "torch's thread count; eps 1e-6 and every parameter (weight, bias) throughout. A casting mode's row "
        "(``torch op fwd, casting_mode=...``) is paired against the op in aten's mode: its figure is what the "
        "mode costs (1.00x: nothing); the models' own norms (HF) are paired against the op in their mode. "
        "The copy limit's bandwidth applies to every pass over memory: the forward makes 2 (x read, y "
        "written), the fused add 4 (x, r; y, h), forward + backward 5 (x, y; dy, x, dx), so a tierkit op's "
        "fraction of the limit is the limit's time for that many passes over its own. The shapes [8192, 2048] "
        "and [2048, 8192] are the width sweep: the same 2^24 elements in rows of other widths, the float32 "
        "forward only, beside the copy limit.",
    ]


def targets(results: dict) -> list[dict]:
    """The performance issue's: forward, the fused add and the casting modes
    >= 0.8 x their roof (the copy limit's bandwidth over their passes, or
    their own in-cache speed where that is lower), forward + backward
    >= 0.6 x the copy limit;
    >= 1.0 x torch.compile forward and forward + backward; the fused add
    >= 1.15 x its unfused form. Per entry, dtype and shape."""
    from tierkit_core.op_table import ROW_REDUCTIONS

    rows = timed_rows(results, "rows")
    out: list[dict] = []
    for entry in ROW_REDUCTIONS:
        peers = [
            ("torch.compile fwd (THP)", 1.0),
            ("torch.compile fwd+bwd (THP)", 1.0),
            ("onnxruntime fwd", 1.2),
        ]
        if entry.fused_add:
            peers += [("x + r (into a preallocated h), then torch op", 1.15), ("onnxruntime fused add", 1.2)]
        for rows_, d in SHAPES + WIDTHS:  # a sweep shape has the float32 forward only
            for dtype in ("float32", "bfloat16"):
                where = f"[{rows_}, {d}] {dtype}"
                mine = [r for r in rows if r.get("op") == entry.name]
                before = len(out)
                for peer, factor in peers:
                    r = pick(mine, impl=peer, nrows=rows_, d=d, dtype=dtype)
                    if r:
                        ratio = round(r[0]["ours_over_theirs"], 2)
                        what = (
                            entry.add_name
                            if peer.startswith("x + r") or peer.endswith("fused add")
                            else entry.name
                        )
                        out.append(
                            target(f"{what} vs {peer} >= {factor}x, {where}", factor, ratio, ratio >= factor)
                        )
                if entry.casting:
                    for mode in ("llama", "gemma"):
                        for peer, factor in (
                            (f"HF {mode} eager (THP)", 2.0),
                            (f"HF {mode} torch.compile (THP)", 1.0),
                        ):
                            r = pick(mine, impl=peer, nrows=rows_, d=d, dtype=dtype)
                            if r:
                                ratio = round(r[0]["ours_over_theirs"], 2)
                                out.append(
                                    target(
                                        f"{entry.name} casting_mode={mode} vs {peer} >= {factor}x, {where}",
                                        factor,
                                        ratio,
                                        ratio >= factor,
                                    )
                                )
                        r = pick(
                            mine, impl=f"torch op fwd, casting_mode={mode}", nrows=rows_, d=d, dtype=dtype
                        )
                        if r and "ours_over_theirs" in r[0]:
                            # Its row is paired against the plain op (the mode's cost: its time over
                            # the plain op's); the goal is the plain op's bandwidth, within 5%.
                            speed = round(1 / r[0]["ours_over_theirs"], 2)
                            out.append(
                                target(
                                    f"{entry.name} casting_mode={mode} >= 0.95 x the plain op's bandwidth "
                                    f"(same run), {where}",
                                    0.95,
                                    speed,
                                    speed >= 0.95,
                                )
                            )
                        if r and "of_limit" in r[0]:
                            out.append(roof_target(f"{entry.name} casting_mode={mode}", 0.8, r[0], where))
                for impl, what, floor in (
                    ("torch op fwd", f"{entry.name} forward", 0.8),
                    ("torch op fused add", f"{entry.add_name} forward", 0.8),
                    ("torch op fwd+bwd", f"{entry.name} forward + backward", 0.6),
                ):
                    r = pick(mine, impl=impl, nrows=rows_, d=d, dtype=dtype)
                    if r and "of_roof" in r[0]:
                        out.append(
                            roof_target(f"{what} over its {r[0]['passes']} passes", floor, r[0], where)
                        )
                    elif r and "of_limit" in r[0]:
                        frac = round(r[0]["of_limit"], 2)
                        out.append(
                            target(
                                f"{what} >= {floor} x the copy limit's bandwidth over its "
                                f"{r[0].get('passes', 2)} passes, {where}",
                                floor,
                                frac,
                                frac >= floor,
                            )
                        )
                out[before:] = in_case(
                    out[before:], {"op": entry.name, "nrows": rows_, "d": d, "dtype": dtype}
                )
    return out
