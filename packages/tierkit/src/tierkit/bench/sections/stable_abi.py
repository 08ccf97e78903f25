"""9. What the stable ABI costs: tierkit_stable (torch-stable) beside tierkit
(torch-cpu) and aten -- dispatch latency with and without requires_grad, large
throughput, and each torch tier's cold build time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ..timing import interleaved, paired_ratio
from ._common import Config, need, per_call_target, pick, row, table, target, timed, timed_rows

TITLE = "Stable ABI trade-off (tierkit_stable vs tierkit vs aten)"
LARGE_N = 16_000_000


def _cold_build_seconds(source: Path, cfg: Config) -> float | str:
    """Seconds to build a wheel of `source` from a copy with no build directory."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / source.name
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                tmp,
                str(copy),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", "2")},
        )
        if proc.returncode != 0:
            return f"build failed: {proc.stderr[-200:]}"
        return time.perf_counter() - start


def measure(cfg: Config) -> list[dict]:
    torch = need("torch")
    need("tierkit_torch_stable")
    need("tierkit_torch")
    rows: list[dict] = []
    for grad in (False, True):
        a = torch.ones(1, requires_grad=grad)
        b = torch.ones(1)
        fns = {
            "torch.ops.aten.add.Tensor": torch.ops.aten.add.Tensor,
            "torch.ops.tierkit.custom_add.default": torch.ops.tierkit.custom_add.default,
            "torch.ops.tierkit_stable.custom_add.default": torch.ops.tierkit_stable.custom_add.default,
        }
        calls: dict[str, Callable[[], object]] = {k: partial(f, a, b) for k, f in fns.items()}
        samples = interleaved(calls, cfg.reps * 2, 20_000)
        rows += [
            row("stable_abi", s, impl=k, kind="dispatch", requires_grad=grad) for k, s in samples.items()
        ]

    n = 1_000_000 if cfg.quick else LARGE_N
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    big = interleaved(
        {
            "tierkit custom_add.out": lambda: torch.ops.tierkit.custom_add.out(x, y, out=out),
            "tierkit_stable custom_add.out": lambda: torch.ops.tierkit_stable.custom_add.out(x, y, out=out),
        },
        cfg.reps * 2,
        3,
    )
    rows += [row("stable_abi", s, impl=k, kind="throughput", n=n) for k, s in big.items()]
    rows.append(
        {
            "section": "stable_abi",
            "kind": "throughput ratio",
            "n": n,
            "ratio": paired_ratio(big["tierkit custom_add.out"], big["tierkit_stable custom_add.out"]),
        }
    )
    if cfg.quick or not cfg.cold_builds:
        # Three cold builds were 5 of the main job's 21 minutes (AMD Zen 3, 2 cores): an option.
        why = "not in --quick" if cfg.quick else "not asked for: `tierkit bench --cold-builds`"
        rows.append({"section": "stable_abi", "kind": "build", "skipped": f"{why} (minutes of compiling)"})
        return rows
    # The bench session runs at the repository root.
    root = Path(os.environ.get("TIERKIT_REPO", os.getcwd())) / "packages"
    tiers = [("torch-cpu", "tierkit_torch"), ("torch-stable", "tierkit_torch_stable")]
    if os.environ.get("CUDA_HOME") and shutil.which(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")):
        tiers.append(("torch-cuda", "tierkit_cuda"))
    for tier, _ in tiers:
        if not (root / tier).is_dir():
            continue
        cfg.log(f"stable_abi: cold build of {tier}")
        seconds = _cold_build_seconds(root / tier, cfg)
        rows.append({"section": "stable_abi", "kind": "build", "tier": tier, "seconds": seconds})
    return rows


def markdown(results: dict) -> list[str]:
    rows = results["sections"].get("stable_abi", {}).get("rows", [])
    d = [r for r in timed_rows(results, "stable_abi") if r["kind"] == "dispatch"]
    out = [
        table(
            ["impl", "requires_grad", "per call"],
            [[r["impl"], r["requires_grad"], timed(r)] for r in d],
        )
    ]
    t = [r for r in timed_rows(results, "stable_abi") if r["kind"] == "throughput"]
    if t:
        out.append("")
        out.append(
            table(
                ["impl (float32, out=)", "n", "per call"], [[r["impl"], f"{r['n']:,}", timed(r)] for r in t]
            )
        )
    builds = [r for r in rows if r.get("kind") == "build"]
    if builds:
        out.append("")
        out.append(
            table(
                ["tier", "cold build (pip wheel, MAX_JOBS=2)"],
                [
                    [
                        r.get("tier", "-"),
                        f"{r['seconds']:.0f} s"
                        if isinstance(r.get("seconds"), float)
                        else r.get("seconds", r.get("skipped")),
                    ]
                    for r in builds
                ],
            )
        )
    return out


def targets(results: dict) -> list[dict]:
    rows = results["sections"].get("stable_abi", {}).get("rows", [])
    ratio = [r for r in rows if r.get("kind") == "throughput ratio"]
    out = []
    if ratio:
        r = ratio[0]
        name = f"tierkit_stable custom_add.out >= 0.95 x tierkit's, n = {r['n']:,} (the ABI costs nothing at size)"
        out.append(target(name, 0.95, round(r["ratio"], 2), r["ratio"] >= 0.95, "paired per repetition"))
    # Per call (the benchmark issue's goal): both medians from one interleaved run.
    for grad in (False, True):
        d = [r for r in rows if r.get("kind") == "dispatch" and r.get("requires_grad") == grad]
        ours = pick(d, impl="torch.ops.tierkit_stable.custom_add.default")
        theirs = pick(d, impl="torch.ops.tierkit.custom_add.default")
        if ours and theirs:
            name = f"tierkit_stable custom_add <= 2.0 x tierkit's per call (1 element, requires_grad={grad})"
            out.append(per_call_target(name, 2.0, ours[0], theirs[0]))
    return out
