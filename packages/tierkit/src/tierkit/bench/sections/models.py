"""14. Models: a small Llama-shaped and a Qwen3-shaped transformers model
(random init from configs, no download), patched by ``tierkit_torch.patch``
against the same model stock, in one process and interleaved: a prefill
forward, one decode step with a KV cache (batch 1, one token: per-call cost
dominates) and a training step, eager and under torch.compile, float32 and
bfloat16. Needs transformers (the tierkit-torch[transformers] extra)."""

from __future__ import annotations

import importlib.util
import textwrap

from ._common import Config, Skip, need, pick, table, target, thp_probe_rows, timed, timed_rows

TITLE = "Models: patched against stock, eager and compiled"

PROBE = textwrap.dedent("""
    import copy, json, os, sys, warnings
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch, tierkit_torch
    import transformers
    from torch._dynamo.utils import counters
    from tierkit.bench.timing import inner_for, interleaved, paired_ratio
    reps, quick, with_compile = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
    warnings.simplefilter("ignore")
    h = 256 if quick else 512
    base = dict(hidden_size=h, intermediate_size=h * 11 // 4, num_hidden_layers=2 if quick else 4,
                num_attention_heads=8, num_key_value_heads=4, vocab_size=2048 if quick else 8192,
                max_position_embeddings=1024, head_dim=h // 8)
    CONFIGS = {"llama": base, "qwen3": base}
    prefill = 64 if quick else 256
    rows = []
    # Every model here runs the same classes' code, so dynamo keeps one cache
    # per forward for all of them: at its default limit (8 entries) it stopped
    # compiling after the first family and dtype and ran the later "compiled"
    # cells eagerly (their "graphs compiled" read 0). Each family and dtype
    # starts from an empty cache, with room for its stock and patched graphs.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    for family, kw in CONFIGS.items():
        for dtype in (torch.float32, torch.bfloat16):
            torch._dynamo.reset()
            torch.manual_seed(0)
            stock = transformers.AutoModelForCausalLM.from_config(
                transformers.CONFIG_MAPPING[family](**kw), dtype=dtype).eval()
            ours = copy.deepcopy(stock)
            tierkit_torch.patch(ours)
            models = {"stock": stock, "patched": ours}
            g = torch.Generator().manual_seed(1)
            ids = torch.randint(0, kw["vocab_size"], (1, prefill), generator=g)
            tok = torch.randint(0, kw["vocab_size"], (1, 1), generator=g)
            train_ids = torch.randint(0, kw["vocab_size"], (2, prefill // 2), generator=g)
            impls = {}
            for name, m in models.items():
                fwd = {"eager": m}
                if with_compile:
                    fwd["compiled"] = torch.compile(m)
                for how, f in fwd.items():
                    def prefill_call(f=f):
                        with torch.no_grad():
                            return f(ids, use_cache=False).logits
                    cache = m(ids, use_cache=True).past_key_values  # a KV cache of `prefill` tokens
                    def decode_call(f=f, cache=cache):
                        with torch.no_grad():
                            out = f(tok, past_key_values=cache, use_cache=True).logits
                        cache.crop(-1)  # drop the token added: the same cache length every call
                        return out
                    def train_call(f=f, m=m):
                        m.zero_grad(set_to_none=True)
                        loss = f(train_ids, labels=train_ids).loss
                        loss.backward()
                        return loss
                    impls[("prefill", how, name)] = prefill_call
                    impls[("decode", how, name)] = decode_call
                    impls[("train", how, name)] = train_call
            for cell in ("prefill", "decode", "train"):
                for how in (("eager", "compiled") if with_compile else ("eager",)):
                    pair = {n: impls[(cell, how, n)] for n in ("stock", "patched")}
                    compiled = {}
                    for n, fn in pair.items():
                        # compile (and recompile for the cache) before timing; count what dynamo did
                        counters.clear()
                        fn(); fn()
                        compiled[n] = {"graph_breaks": sum(counters["graph_break"].values()),
                                       "graphs": counters["stats"]["unique_graphs"]}
                        fn()
                        compiled[n]["graphs_after_warmup"] = counters["stats"]["unique_graphs"] - compiled[n]["graphs"]
                    s = interleaved(pair, reps, 1, warmup=1)
                    for n, t in s.items():
                        rows.append({"model": family, "cell": cell, "how": how, "impl": n,
                                     "dtype": str(dtype).removeprefix("torch."), "seconds": t.seconds,
                                     "ours_over_theirs": paired_ratio(t, s["patched"]),
                                     **(compiled[n] if how == "compiled" else {})})
    print(json.dumps(rows))
""")


def measure(cfg: Config) -> list[dict]:
    need("torch")
    need("tierkit_torch")
    if importlib.util.find_spec("transformers") is None:
        raise Skip("transformers is not installed (the tierkit-torch[transformers] extra)")
    args = [str(cfg.reps), "1" if cfg.quick else "0", "0" if cfg.quick else "1"]
    return thp_probe_rows("models", PROBE, args, "models", timeout=3600)


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "models")
    counted = any("graphs" in r for r in rows)
    return [
        table(
            ["model", "cell", "eager or compiled", "dtype", "stock", "patched", "patched's speed-up"],
            [
                [
                    r["model"],
                    r["cell"],
                    r["how"],
                    r["dtype"],
                    timed(r),
                    timed(p[0]),
                    f"{r['ours_over_theirs']:.2f}x",
                ]
                for r in rows
                if r["impl"] == "stock"
                and (
                    p := pick(
                        rows, model=r["model"], cell=r["cell"], how=r["how"], dtype=r["dtype"], impl="patched"
                    )
                )
            ],
        ),
        "",
        "Prefill: batch 1 x 256 tokens, no cache; decode: one token against a KV cache of 256 (cropped back after "
        "each call); train: batch 2 x 128, forward and backward. Hidden 512, 4 layers, 8 heads (4 KV), vocab 8192; "
        "eager attention as configured by default; the speed-up is paired per repetition; torch's thread count.",
        *(
            [
                "",
                table(
                    [
                        "model",
                        "cell",
                        "dtype",
                        "graph breaks (stock, patched)",
                        "graphs compiled (stock, patched)",
                        "recompiles after warm-up (stock, patched)",
                    ],
                    [
                        [
                            r["model"],
                            r["cell"],
                            r["dtype"],
                            f"{r['graph_breaks']}, {p[0]['graph_breaks']}",
                            f"{r['graphs']}, {p[0]['graphs']}",
                            f"{r['graphs_after_warmup']}, {p[0]['graphs_after_warmup']}",
                        ]
                        for r in rows
                        if r["impl"] == "stock"
                        and "graphs" in r
                        and (
                            p := pick(
                                rows,
                                model=r["model"],
                                cell=r["cell"],
                                how=r["how"],
                                dtype=r["dtype"],
                                impl="patched",
                            )
                        )
                    ],
                ),
                "",
                "Counted by torch._dynamo's counters over each compiled model's two warm-up calls of the cell (the decode "
                "cell's first call compiles for the KV cache), then over a third call (recompiles after warm-up).",
            ]
            if counted
            else []
        ),
    ]


def targets(results: dict) -> list[dict]:
    """The performance issue's: patched >= 1.0 x stock eager, and patched-compiled >= 1.0 x stock compiled, every cell."""
    rows = timed_rows(results, "models")
    out = []
    for r in rows:
        if r["impl"] != "stock":
            continue
        ratio = round(r["ours_over_theirs"], 2)
        name = f"{r['model']} {r['cell']} patched vs stock, {r['how']}, {r['dtype']} >= 1.0x"
        out.append(target(name, 1.0, ratio, ratio >= 1.0))
    for r in rows:
        if r["impl"] != "patched" or "graphs" not in r:
            continue
        where = f"{r['model']} {r['cell']} compiled, {r['dtype']}"
        # A "compiled" cell that compiled nothing ran eagerly (dynamo gave up on its cache).
        stock = pick(rows, model=r["model"], cell=r["cell"], how=r["how"], dtype=r["dtype"], impl="stock")
        graphs = min(r["graphs"], *(s["graphs"] for s in stock if "graphs" in s))
        out.append(target(f"{where}: stock and patched each compiled >= 1 graph", 1, graphs, graphs >= 1))
        out.append(
            target(f"{where}: patched graph breaks == 0", 0, r["graph_breaks"], r["graph_breaks"] == 0)
        )
        after = r["graphs_after_warmup"]
        out.append(target(f"{where}: patched recompiles after warm-up == 0", 0, after, after == 0))
    return out
