"""15. Every entry of the op table against its own formula: eager, torch.compile and numpy."""

from __future__ import annotations

import json
import textwrap

from ._common import Config, need, table, thp_probe_rows, timed, timed_rows

TITLE = "Every op table entry against its formula in eager, torch.compile and numpy"

# The peers are the entry's `reference` formula itself (tierkit_core.op_table),
# so a new entry is measured here with no new bench code. In a subprocess
# with THP_MEM_ALLOC_ENABLE=1, as the silu section (torch reads it at start-up).
PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np, torch, tierkit_torch, tierkit_bridge as tb
    from tierkit_core.op_table import OPS
    from tierkit_core.op_testing import evaluate, numpy_functions, scalar_values
    from tierkit_torch_common import testing
    from tierkit.bench.timing import inner_for, interleaved, paired_ratio
    reps, sizes, with_compile = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "1"
    torch_fns = {"silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid}
    numpy_fns = numpy_functions(np)
    rows = []
    for op in OPS:
        eager = lambda *x, _n=op.name: evaluate(_n, x, torch_fns)
        compiled = torch.compile(eager, dynamic=True) if with_compile else None
        for n in sizes:
            for dtype in (torch.float32, torch.bfloat16):
                xs = testing.random_inputs(op.name, n, dtype=dtype, generator=torch.Generator().manual_seed(0))
                impls = {"torch op": lambda: testing.call("tierkit", op.name, *xs),
                         "torch eager": lambda: eager(*xs)}
                if compiled is not None:
                    compiled(*xs)
                    impls["torch.compile"] = lambda: compiled(*xs)
                if dtype == torch.float32:
                    ns = [x.numpy() for x in xs]
                    fn, s = getattr(tb, op.bridge), scalar_values(op.name)
                    impls["bridge"] = lambda: fn(*ns, *s)
                    impls["numpy"] = lambda: evaluate(op.name, ns, numpy_fns)
                nbytes = (len(xs) + 1) * n * xs[0].element_size()
                samples = interleaved(impls, reps, inner_for(nbytes / 10e9))
                for impl, x in samples.items():
                    ref = "bridge" if impl == "numpy" else "torch op"
                    rows.append({"op": op.name, "impl": impl, "n": n, "dtype": str(dtype).removeprefix("torch."),
                                 "bytes": nbytes, "seconds": x.seconds,
                                 "ours_over_theirs": paired_ratio(x, samples[ref])})
    print(json.dumps(rows))
""")


def sizes(cfg: Config) -> list[int]:
    return [1_000_000] if cfg.quick else [16_000_000]


def measure(cfg: Config) -> list[dict]:
    need("numpy")
    need("torch")
    need("tierkit_torch")
    need("tierkit_bridge")
    need("tierkit_torch_common.testing")
    args = [str(cfg.reps), json.dumps(sizes(cfg)), "0" if cfg.quick else "1"]
    return thp_probe_rows("entries", PROBE, args, "entries")


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "entries")
    return [
        table(
            ["op", "impl", "dtype", "n", "time", "GB/s", "tierkit's speed-up over it"],
            [
                [
                    r["op"],
                    r["impl"],
                    r["dtype"],
                    f"{r['n']:,}",
                    timed(r),
                    f"{r['bytes'] / r['median_s'] / 1e9:.1f}",
                    "—" if r["impl"] in ("torch op", "bridge") else f"{r['ours_over_theirs']:.2f}x",
                ]
                for r in rows
            ],
        ),
        "",
        "Each entry of `tierkit_core.op_table.OPS` against its own `reference` formula: "
        "evaluated by torch eagerly, compiled by `torch.compile(dynamic=True)`, and by numpy "
        "(the bridge's peer; float32). Speed-ups paired per repetition, one process with "
        "THP_MEM_ALLOC_ENABLE=1; GB/s counts each input read and the output written once.",
    ]


def targets(results: dict) -> list[dict]:
    # The per-op targets live in the kernels and silu sections; this one
    # shows every entry side by side, a new one included.
    return []
