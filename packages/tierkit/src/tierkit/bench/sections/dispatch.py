"""4. Dispatch latency on 1-element tensors, in-process and JIT-built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

from ..timing import Samples, interleaved
from ._common import (
    Config,
    color_of,
    need,
    per_call_target,
    pick,
    row,
    skipped_lines,
    table,
    timed,
    timed_rows,
)

TITLE = "Dispatch latency (1-element tensors)"

JIT_PROBE = textwrap.dedent("""
    import json, sys, torch, timeit
    from tierkit_torch import jit
    jit.load(build_directory=sys.argv[1])
    a, b = torch.ones(1), torch.ones(1)
    f_aten, f_jit = torch.ops.aten.add.Tensor, torch.ops.tierkit.custom_add.default
    res = {"aten.add.Tensor": [], "JIT-built custom_add": []}
    for _ in range(int(sys.argv[2])):
        res["aten.add.Tensor"].append(timeit.timeit(lambda: f_aten(a, b), number=20000) / 20000)
        res["JIT-built custom_add"].append(timeit.timeit(lambda: f_jit(a, b), number=20000) / 20000)
    print(json.dumps(res))
""")


def measure(cfg: Config) -> list[dict]:
    torch = need("torch")
    tt = need("tierkit_torch")
    a, b = torch.ones(1), torch.ones(1)
    aten, custom = torch.ops.aten.add.Tensor, torch.ops.tierkit.custom_add.default
    samples = interleaved(
        {
            "torch.add": lambda: torch.add(a, b),
            "torch.ops.aten.add.Tensor": lambda: aten(a, b),
            "torch.ops.tierkit.custom_add.default": lambda: custom(a, b),
            "tierkit_torch.custom_add (typed face)": lambda: tt.custom_add(a, b),
        },
        cfg.reps * 2,
        20_000,
    )
    rows = [row("dispatch", s, impl=impl, process="main") for impl, s in samples.items()]
    if cfg.quick:
        rows.append(
            {
                "section": "dispatch",
                "impl": "JIT-built custom_add",
                "skipped": "not in --quick (needs a ~30 s JIT build)",
            }
        )
        return rows
    cfg.log("dispatch: JIT build in a subprocess")
    # The build folder is scratch: under --out it would land in the committed report.
    with tempfile.TemporaryDirectory(prefix="tierkit-jit-build-") as build:
        proc = subprocess.run(
            [sys.executable, "-c", JIT_PROBE, build, str(cfg.reps)],
            capture_output=True,
            text=True,
            env={**os.environ, "TIERKIT_TORCH_JIT": "1"},
        )
    if proc.returncode != 0:
        rows.append(
            {
                "section": "dispatch",
                "impl": "JIT-built custom_add",
                "skipped": f"JIT build failed: {proc.stderr[-300:]}",
            }
        )
        return rows
    for impl, values in json.loads(proc.stdout.strip().splitlines()[-1]).items():
        rows.append(row("dispatch", Samples(values), impl=impl, process="JIT subprocess"))
    return rows


def markdown(results: dict) -> list[str]:
    out = [
        table(
            ["impl", "process", "per call"],
            [[r["impl"], r["process"], timed(r)] for r in timed_rows(results, "dispatch")],
        )
    ]
    out += [f"\n{line}" for line in skipped_lines(results, "dispatch", "impl")]
    return out


def targets(results: dict) -> list[dict]:
    out = []
    d = timed_rows(results, "dispatch")
    ours = pick(d, impl="torch.ops.tierkit.custom_add.default")
    aten = pick(d, impl="torch.ops.aten.add.Tensor")
    name = "torch.ops.tierkit.custom_add.default <= 1.3 x torch.ops.aten.add.Tensor (1 element)"
    if ours and aten:
        out.append(per_call_target(name, 1.3, ours[0], aten[0]))
    face = pick(d, impl="tierkit_torch.custom_add (typed face)")
    add = pick(d, impl="torch.add")
    if face and add:
        name = "tierkit_torch.custom_add (typed face) <= 1.3 x torch.add (1 element)"
        out.append(per_call_target(name, 1.3, face[0], add[0]))
    return out


def plots(results: dict, out_dir: str, plt, save) -> list[str]:
    made = []
    sec = results["sections"]
    d = [r for r in sec.get("dispatch", {}).get("rows", []) if "median_s" in r]
    if d:
        fig, ax = plt.subplots(figsize=(8, 4))
        labels = [f"{r['impl']}\n({r['process']})" for r in d]
        ax.barh(
            labels,
            [r["median_s"] * 1e6 for r in d],
            color=[color_of(r["impl"]) for r in d],
            xerr=[
                [(r["median_s"] - r["min_s"]) * 1e6 for r in d],
                [(r["max_s"] - r["median_s"]) * 1e6 for r in d],
            ],
        )
        ax.set_xlabel("microseconds per call, 1-element tensors")
        ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        made.append(save(fig, "dispatch.png"))
        plt.close(fig)
    return made
