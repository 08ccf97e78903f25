"""13. The row maps, every ROW_MAPS entry of the op table (rotary
embeddings), on q of Llama's layout [batch, heads, seq, head_dim] with
tables [1, 1, seq, head_dim], against the models' own eager code (Hugging
Face's ``q * cos + rotate_half(q) * sin``), that code under torch.compile,
and the compiled copy loop; sizes beyond the caches. A new entry is
measured here with no new code."""

from __future__ import annotations

import textwrap

from ._common import PROBE_HEAD, Config, in_case, pick, target, timed_rows
from ._copy_limit import limit_table, measure_entries, roof_target

TITLE = "Row maps (rotary embeddings): against eager, torch.compile and the compiled copy limit"

PROBE = PROBE_HEAD + textwrap.dedent("""
    from tierkit_core.op_table import ROW_MAPS
    shapes = cases

    def rotate_half(v):
        h = v.shape[-1] // 2
        return torch.cat((-v[..., h:], v[..., :h]), -1)

    def eager(q, cos, sin):  # transformers' apply_rotary_pos_emb, for one tensor
        return q * cos + rotate_half(q) * sin

    comp = torch.compile(eager, dynamic=False) if with_compile else None
    rows = []
    for entry in ROW_MAPS:
        op = getattr(torch.ops.tierkit, entry.name)
        for shape in shapes:
            for dtype in (torch.float32, torch.bfloat16):
                if not wanted(op=entry.name, dtype=str(dtype).removeprefix("torch.")):
                    continue
                case_start = time.perf_counter()  # the case's seconds: what measuring it again costs (settle.py)
                b, h, s, d = shape
                if dtype == torch.bfloat16:
                    b *= 2  # the same bytes as float32's
                g = torch.Generator().manual_seed(0)
                q = torch.randn(b, h, s, d, generator=g).to(dtype)
                pos = torch.arange(s, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
                emb = torch.cat((pos, pos), -1)
                cos, sin = (t.to(dtype).reshape(1, 1, s, d) for t in (emb.cos(), emb.sin()))
                impls = {"torch op": lambda: op(q, cos, sin, False), "torch eager (THP)": lambda: eager(q, cos, sin)}
                if comp is not None:
                    comp(q, cos, sin)
                    impls["torch.compile (THP)"] = lambda: comp(q, cos, sin)
                nbytes = q.numel() * q.element_size() * 2  # q read, the result written
                limit = None
                if stream_lib.available():
                    stream = stream_lib.Stream(q.numel() * q.element_size() // 4, torch.get_num_threads())
                    limit = "STREAM copy"
                    impls[limit] = stream.timer("copy", "fastest")
                t = interleaved(impls, reps, inner_for(nbytes / 10e9), warmup=1, best_of=stream_lib.BEST_OF)
                compute = None
                if limit:  # the compute roof: k positions of one head (q and the tables in cache)
                    at = lambda k: lambda: op(q[:1, :1, :k], cos[:, :, :k], sin[:, :, :k], False)
                    k_of = lambda nbytes: min(s, max(1, nbytes // (d * q.element_size())))
                    per_row = in_cache_seconds_per_unit(at, k_of(64 << 10), k_of(256 << 10), reps,
                                                        t["torch op"].median, b * h * s / torch.get_num_threads())
                    compute = per_row and per_row * b * h * s / torch.get_num_threads()
                case_seconds = time.perf_counter() - case_start
                for impl, x in t.items():
                    row = {"op": entry.name, "impl": impl, "shape": [b, h, s, d], "case_seconds": case_seconds,
                           "dtype": str(dtype).removeprefix("torch."), "seconds": x.seconds,
                           "gbs": nbytes / x.median / 1e9}
                    if impl != limit:
                        row["ours_over_theirs"] = paired_ratio(x, t["torch op"])
                        if limit and impl == "torch op":
                            row["of_limit"] = paired_ratio(t[limit], x)
                        if limit and impl == "torch op" and compute:
                            row.update(roof_fields(t[limit].median, compute, x.median, row["of_limit"]))
                    rows.append(row)
    print(json.dumps(rows))
""")


# What one measurement shares: settle.py measures a case (every shape of it) again alone.
CASE_FIELDS = ("op", "dtype")

# Of the roof: float32 0.8, bfloat16 0.7 (its 16-bit lanes widen and narrow).
FLOORS = {"float32": 0.8, "bfloat16": 0.7}


def shapes(cfg: Config) -> list[list[int]]:
    # float32 [4, 32, 2048, 128]: 128 MiB, 4x a 32 MiB last-level cache (bfloat16 doubles the batch).
    return [[1, 8, 256, 64]] if cfg.quick else [[4, 32, 2048, 128]]


def measure(cfg: Config) -> list[dict]:
    from tierkit_core.op_table import ROW_MAPS

    return measure_entries(cfg, "maps", PROBE, "row maps", ROW_MAPS, shapes(cfg))


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "maps")
    return [
        limit_table(rows, ("q", lambda r: str(r["shape"])), "q and the result", ("torch op",)),
        "",
        "Speed-ups are paired per repetition against the tierkit op; one process with THP_MEM_ALLOC_ENABLE=1 "
        "and torch's thread count; the tables [1, 1, seq, head_dim] as the models' rotary modules make them.",
    ]


def targets(results: dict) -> list[dict]:
    """The performance issues': >= FLOORS[dtype] x the roof (the copy limit
    beyond the caches, or the op's own in-cache speed where lower), >= 2 x
    eager, >= 1.0 x torch.compile; per entry and dtype."""
    from tierkit_core.op_table import ROW_MAPS

    rows = timed_rows(results, "maps")
    out: list[dict] = []
    for entry in ROW_MAPS:
        for dtype in ("float32", "bfloat16"):
            before = len(out)
            mine = [
                r
                for r in rows
                if r.get("op") == entry.name and r.get("dtype") == dtype and r["shape"][2] >= 2048
            ]
            for peer, factor in (("torch eager (THP)", 2.0), ("torch.compile (THP)", 1.0)):
                r = pick(mine, impl=peer)
                if r:
                    ratio = round(r[0]["ours_over_theirs"], 2)
                    out.append(
                        target(
                            f"{entry.name} vs {peer} >= {factor}x, {dtype}", factor, ratio, ratio >= factor
                        )
                    )
            r = pick(mine, impl="torch op")
            if r and "of_limit" in r[0]:
                out.append(roof_target(entry.name, FLOORS[dtype], r[0], dtype))
            out[before:] = in_case(out[before:], {"op": entry.name, "dtype": dtype})
    return out
