"""GPU benchmark of the tierkit CUDA kernels.

For scale_shift and custom_add at 1M ... 1G elements, float32 and bfloat16:
time per call with CUDA events after warm-up, effective bandwidth (bytes the
op must move / time), and that bandwidth as a fraction of a device-to-device
copy (``torch.clone``) of the same bytes measured in the same run, beside
eager torch and ``torch.compile`` of the same expression.

Why events: kernel launches return before the GPU has done the work, so a
host clock around a call measures the launch. Events are recorded into the
stream and timed by the GPU.

    python -m tierkit_cuda.benchmark [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

import torch

SIZES = [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]
QUICK_SIZES = [1 << 20, 1 << 24]
ALPHA, BETA = 2.0, 1.0


def event_time_ms(fn, iters: int, repeats: int = 5) -> list[float]:
    """Per-call milliseconds of `fn`, one figure per repeat (median is reported)."""
    fn()  # warm-up (allocator, caches, compile)
    torch.cuda.synchronize()
    figures = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        figures.append(start.elapsed_time(stop) / iters)
    return figures


def fits(n: int, dtype: torch.dtype, tensors: int) -> bool:
    free, _ = torch.cuda.mem_get_info()
    return n * torch.tensor([], dtype=dtype).element_size() * tensors * 1.2 < free


def run(sizes=SIZES, dtypes=(torch.float32, torch.bfloat16), with_compile: bool = True) -> list[dict]:
    import tierkit_cuda  # noqa: F401

    ops = torch.ops.tierkit
    rows = []
    compiled_ss: Any = None
    compiled_add: Any = None
    if with_compile:

        def scale_shift(x):
            return ALPHA * x + BETA

        def add(x, y):
            return x + y

        compiled_ss = torch.compile(scale_shift)
        compiled_add = torch.compile(add)
    for dtype in dtypes:
        item = torch.tensor([], dtype=dtype).element_size()
        for n in sizes:
            if not fits(n, dtype, tensors=4):
                rows.append({"n": n, "dtype": str(dtype), "skipped": "not enough free GPU memory"})
                continue
            a = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            iters = max(3, min(200, (1 << 28) // n))
            clone = statistics.median(event_time_ms(lambda: a.clone(), iters))
            cases = {
                "scale_shift": (
                    2 * n * item,
                    {
                        "tierkit": lambda: ops.scale_shift(a, ALPHA, BETA),
                        "eager": lambda: ALPHA * a + BETA,
                        **({"compile": lambda: compiled_ss(a)} if with_compile else {}),
                    },
                ),
                "custom_add": (
                    3 * n * item,
                    {
                        "tierkit": lambda: ops.custom_add(a, b),
                        "eager": lambda: a + b,
                        **({"compile": lambda: compiled_add(a, b)} if with_compile else {}),
                    },
                ),
            }
            clone_gbs = 2 * n * item / clone / 1e6
            for op, (nbytes, impls) in cases.items():
                for impl, fn in impls.items():
                    times = event_time_ms(fn, iters)
                    ms = statistics.median(times)
                    gbs = nbytes / ms / 1e6
                    rows.append(
                        {
                            "op": op,
                            "impl": impl,
                            "n": n,
                            "dtype": str(dtype).removeprefix("torch."),
                            "ms": ms,
                            "ms_min": min(times),
                            "ms_max": max(times),
                            "gbs": gbs,
                            "clone_gbs": clone_gbs,
                            "fraction_of_clone": gbs / clone_gbs,
                        }
                    )
            a = b = None  # type: ignore[assignment]  # free this size's tensors before the next allocation
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tierkit_cuda.benchmark")
    parser.add_argument("--quick", action="store_true", help="two sizes, no torch.compile")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (torch.cuda.is_available() is False)")
        return 0
    rows = run(QUICK_SIZES if args.quick else SIZES, with_compile=not args.quick)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'op':<12}{'impl':<9}{'dtype':<10}{'n':>12}{'ms':>10}{'GB/s':>9}{'/clone':>8}")
    for r in rows:
        if "skipped" in r:
            print(f"{'':<12}{'':<9}{r['dtype']:<10}{r['n']:>12}  skipped: {r['skipped']}")
            continue
        print(
            f"{r['op']:<12}{r['impl']:<9}{r['dtype']:<10}{r['n']:>12}{r['ms']:>10.4f}{r['gbs']:>9.1f}"
            f"{r['fraction_of_clone']:>8.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
