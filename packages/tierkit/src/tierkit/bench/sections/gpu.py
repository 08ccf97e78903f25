"""8. GPU: the CUDA tier's kernels vs torch (tierkit_cuda.benchmark), where a GPU is."""

from __future__ import annotations

from ._common import Config, Skip, need, not_measured, table, target

TITLE = "GPU"


def measure(cfg: Config) -> list[dict]:
    torch = need("torch")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device (torch.cuda.is_available() is False)")
    benchmark = need("tierkit_cuda.benchmark")
    from tierkit_cuda import benchmark  # noqa: F811

    sizes = benchmark.QUICK_SIZES if cfg.quick else benchmark.SIZES
    return [{"section": "gpu", **r} for r in benchmark.run(sizes, with_compile=not cfg.quick)]


def markdown(results: dict) -> list[str]:
    g = [r for r in results["sections"].get("gpu", {}).get("rows", []) if "ms" in r]
    if g:
        return [
            table(
                ["op", "impl", "dtype", "n", "ms", "GB/s", "of clone"],
                [
                    [
                        r["op"],
                        r["impl"],
                        r["dtype"],
                        r["n"],
                        f"{r['ms']:.4f}",
                        f"{r['gbs']:.1f}",
                        f"{r['fraction_of_clone']:.2f}",
                    ]
                    for r in g
                ],
            )
        ]
    return []


def targets(results: dict) -> list[dict]:
    out = []
    g = results["sections"].get("gpu", {})
    name = "GPU kernels >= 0.9 x torch.clone bandwidth at >= 2.56e8"
    if g.get("skipped"):
        out.append(not_measured(name, 0.9, g["skipped"]))
    else:
        rows = [r for r in g.get("rows", []) if r.get("impl") == "tierkit" and r.get("n", 0) >= 256_000_000]
        if rows:
            worst = min(r["fraction_of_clone"] for r in rows)
            out.append(target(name, 0.9, round(worst, 3), worst >= 0.9))
        else:
            out.append(not_measured(name, 0.9, "no size >= 2.56e8 measured"))
    return out
