"""The benchmark's sections. Each returns rows (dicts of figures) or raises
Skip with the reason it cannot run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass

from .timing import Samples, inner_for, interleaved, paired_ratio


class Skip(Exception):
    """This section cannot run here; the message says why."""


@dataclass
class Config:
    quick: bool
    out_dir: str
    log: object = print

    @property
    def reps(self) -> int:
        return 3 if self.quick else 7


ALPHA, BETA = 2.0, 1.0


def _need(module: str):
    try:
        return __import__(module)
    except ImportError as exc:
        raise Skip(f"{module} is not installed") from exc


def _row(section: str, s: Samples, **fields) -> dict:
    return {"section": section, **fields, "median_s": s.median, "min_s": s.min, "max_s": s.max}


def _gbs(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9


# ---- 1. the limit ---------------------------------------------------------------


def stream(cfg: Config) -> list[dict]:
    """STREAM-style bandwidth with torch's own loops (copy, scale, add, triad)
    over arrays far larger than the caches; bytes counted as STREAM does."""
    torch = _need("torch")
    n = (1 << 23) if cfg.quick else (1 << 25)  # 32 MiB / 128 MiB per float32 array
    a, b, c = (torch.rand(n) for _ in range(3))
    kernels = {
        "copy": (lambda: b.copy_(a), 2),
        "scale": (lambda: torch.mul(a, ALPHA, out=b), 2),
        "add": (lambda: torch.add(a, b, out=c), 3),
        "triad": (lambda: torch.add(b, c, alpha=ALPHA, out=a), 3),
    }
    rows = []
    saved = torch.get_num_threads()
    try:
        for threads in sorted({1, saved}):
            torch.set_num_threads(threads)
            samples = interleaved({k: fn for k, (fn, _) in kernels.items()}, cfg.reps)
            for k, (_, arrays) in kernels.items():
                s = samples[k]
                rows.append(
                    _row("stream", s, kernel=k, threads=threads, n=n, gbs=_gbs(arrays * n * 4, s.median))
                )
    finally:
        torch.set_num_threads(saved)
    return rows


# ---- 2. kernels ---------------------------------------------------------------------


def kernel_sizes(cfg: Config) -> list[int]:
    return (
        [1_000, 100_000, 1_000_000]
        if cfg.quick
        else [1_000, 10_000, 100_000, 1_000_000, 16_000_000, 64_000_000]
    )


def kernels(cfg: Config) -> list[dict]:
    np = _need("numpy")
    torch = _need("torch")
    tb = _need("tierkit_bridge")
    _need("tierkit_torch")
    ops = torch.ops.tierkit
    compiled_ss = compiled_add = None
    if not cfg.quick:
        compiled_ss = torch.compile(lambda x: ALPHA * x + BETA, dynamic=True)  # one compile for every size
        compiled_add = torch.compile(lambda x, y: x + y, dynamic=True)
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
            "numpy": lambda: ALPHA * x + BETA,
            "torch eager": lambda: ALPHA * xt + BETA,
            "STREAM scale": lambda: torch.mul(xt, ALPHA, out=outt),
        }
        add = {
            "bridge out=": lambda: tb.add(x, y, out=out),
            "bridge": lambda: tb.add(x, y),
            "torch add_out": lambda: ops.add_out(xt, yt, outt),
            "torch op": lambda: ops.custom_add(xt, yt),
            "numpy": lambda: x + y,
            "torch eager": lambda: xt + yt,
            "STREAM add": lambda: torch.add(xt, yt, out=outt),
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
        for op, impls, arrays, ref in (("scale_shift", ss, 2, "STREAM scale"), ("add", add, 3, "STREAM add")):
            samples = interleaved(impls, reps, inner)
            for impl, s in samples.items():
                rows.append(
                    _row(
                        "kernels",
                        s,
                        op=op,
                        impl=impl,
                        dtype="float32",
                        n=n,
                        gbs=_gbs(arrays * n * 4, s.median),
                        fraction_of_stream=paired_ratio(samples[ref], s),
                        compile_s=compile_s.get(op) if impl == "torch.compile" else None,
                    )
                )
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
                        _row(
                            "kernels",
                            s,
                            op="scale_shift",
                            impl=impl,
                            dtype=str(dtype).removeprefix("torch."),
                            n=n,
                            gbs=_gbs(2 * n * item, s.median),
                        )
                    )
    return rows


# ---- 3. the boundary --------------------------------------------------------------------


def boundary(cfg: Config) -> list[dict]:
    np = _need("numpy")
    tb = _need("tierkit_bridge")
    torch = _need("torch")
    _need("tierkit_torch")
    rows = []
    sizes = [1_000, 10_000] if cfg.quick else [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    for n in sizes:
        cfg.log(f"boundary: n={n:,}")
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.random.default_rng(1).random(n, dtype=np.float32)
        lx, ly = x.tolist(), y.tolist()
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        reps = 3 if n >= 1_000_000 else cfg.reps
        slow = interleaved(
            {"vector_add_list": lambda: tb.vector_add_list(lx, ly)}, reps, inner_for(n * 60e-9, 0.05)
        )
        fast = interleaved(
            {
                "bridge add (numpy, zero-copy)": lambda: tb.add(x, y),
                "torch op custom_add": lambda: torch.ops.tierkit.custom_add(xt, yt),
            },
            reps,
            inner_for(n * 4 / 10e9),
        )
        for impl, s in {**slow, **fast}.items():
            rows.append(_row("boundary", s, kind="size", impl=impl, n=n))
    py_noop = lambda: None  # noqa: E731
    calls = interleaved({"bound no-op (pybind11)": tb._noop, "Python no-op": py_noop}, cfg.reps, 100_000)
    for impl, s in calls.items():
        rows.append(_row("boundary", s, kind="per-call", impl=impl, n=0))
    # The same 1M elements as 1000 calls of 1000, or one call.
    x = np.random.default_rng(2).random((1000, 1000), dtype=np.float32)
    out = np.empty_like(x)
    rows_x, rows_out = list(x), list(out)

    def many():
        for xi, oi in zip(rows_x, rows_out):
            tb.scale_shift(xi, ALPHA, BETA, out=oi)

    batch = interleaved(
        {"1000 calls x 1000": many, "1 call x 1000000": lambda: tb.scale_shift(x, ALPHA, BETA, out=out)},
        cfg.reps,
    )
    for impl, s in batch.items():
        rows.append(_row("boundary", s, kind="batching", impl=impl, n=1_000_000))
    return rows


# ---- 4. dispatch ---------------------------------------------------------------------------

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


def dispatch(cfg: Config) -> list[dict]:
    torch = _need("torch")
    tt = _need("tierkit_torch")
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
    rows = [_row("dispatch", s, impl=impl, process="main") for impl, s in samples.items()]
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
    build = os.path.join(cfg.out_dir, "jit-build")
    os.makedirs(build, exist_ok=True)
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
        rows.append(_row("dispatch", Samples(values), impl=impl, process="JIT subprocess"))
    return rows


# ---- 5. DLPack / buffer protocol -------------------------------------------------------------


def exports(cfg: Config) -> list[dict]:
    np = _need("numpy")
    torch = _need("torch")
    tb = _need("tierkit_bridge")
    rows = []
    for n in [1_000, 1_000_000] if cfg.quick else [1_000, 64_000_000]:
        buf = tb.Buffer.empty(n, "float32")
        samples = interleaved(
            {
                "np.from_dlpack": lambda: np.from_dlpack(buf),
                "torch.from_dlpack": lambda: torch.from_dlpack(buf),
                "np.asarray (buffer protocol)": lambda: np.asarray(buf),
                "memoryview": lambda: memoryview(buf),
            },
            cfg.reps,
            5_000,
        )
        rows += [_row("exports", s, impl=impl, n=n) for impl, s in samples.items()]
    return rows


# ---- 6. GIL -------------------------------------------------------------------------------------


def gil(cfg: Config) -> list[dict]:
    np = _need("numpy")
    tb = _need("tierkit_bridge")
    n = 1_000_000 if cfg.quick else 16_000_000
    calls = 4 if cfg.quick else 8
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    rows = []
    saved = tb.get_num_threads()
    tb.set_num_threads(1)  # one core per Python thread: the scaling is the GIL's doing
    try:
        for k in (1, 2, 4):
            outs = [np.empty_like(x) for _ in range(k)]

            def work(i):
                for _ in range(calls):
                    tb.scale_shift(x, ALPHA, BETA, out=outs[i])

            walls = []
            for _ in range(cfg.reps):
                threads = [threading.Thread(target=work, args=(i,)) for i in range(k)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                walls.append(time.perf_counter() - t0)
            s = Samples(walls)
            rows.append(
                _row(
                    "gil",
                    s,
                    threads=k,
                    n=n,
                    calls_per_thread=calls,
                    gbs=_gbs(k * calls * 2 * n * 4, s.median),
                )
            )
    finally:
        tb.set_num_threads(saved)
    base = rows[0]["gbs"]
    for r in rows:
        r["speedup_vs_1"] = r["gbs"] / base
    return rows


# ---- 7. allocation ----------------------------------------------------------------------------------


def allocation(cfg: Config) -> list[dict]:
    np = _need("numpy")
    torch = _need("torch")
    tb = _need("tierkit_bridge")
    _need("tierkit_torch")
    n = 4_000_000 if cfg.quick else 64_000_000
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    xt = torch.from_numpy(x)
    out = np.empty_like(x)

    def cached():
        tb.allocator.set_enabled(True)
        try:
            return tb.scale_shift(x, ALPHA, BETA)
        finally:
            tb.allocator.set_enabled(False)

    impls = {
        "bridge out= (preallocated)": lambda: tb.scale_shift(x, ALPHA, BETA, out=out),
        "bridge, new output (system allocator)": lambda: tb.scale_shift(x, ALPHA, BETA),
        "bridge, new output (caching allocator, warm)": cached,
        "torch op, new output (torch CPU allocator)": lambda: torch.ops.tierkit.scale_shift(xt, ALPHA, BETA),
        "torch eager alpha*x+beta": lambda: ALPHA * xt + BETA,
        "numpy alpha*x+beta": lambda: ALPHA * x + BETA,
    }
    tb.allocator.release_cached()
    samples = interleaved(impls, max(3, cfg.reps - 2), 1, warmup=2)
    ref = samples["bridge out= (preallocated)"]
    rows = [_row("allocation", s, impl=impl, n=n, vs_out=paired_ratio(s, ref)) for impl, s in samples.items()]
    rows.append({"section": "allocation", "impl": "caching allocator stats", **tb.allocator.stats()})
    tb.allocator.release_cached()
    return rows


# ---- 8. GPU ---------------------------------------------------------------------------------------------


def gpu(cfg: Config) -> list[dict]:
    torch = _need("torch")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device (torch.cuda.is_available() is False)")
    benchmark = _need("tierkit_cuda.benchmark")
    from tierkit_cuda import benchmark  # noqa: F811

    sizes = benchmark.QUICK_SIZES if cfg.quick else benchmark.SIZES
    return [{"section": "gpu", **r} for r in benchmark.run(sizes, with_compile=not cfg.quick)]


SECTIONS = {
    "stream": stream,
    "kernels": kernels,
    "boundary": boundary,
    "dispatch": dispatch,
    "exports": exports,
    "gil": gil,
    "allocation": allocation,
    "gpu": gpu,
}
