"""14. Models: a small Llama-shaped and a Qwen3-shaped transformers model
(random init from configs, no download), patched by ``tierkit_torch.patch``
against the same model stock, in one process and interleaved: a prefill
forward, one decode step with a KV cache (batch 1, one token: per-call cost
dominates) and a training step, eager and under torch.compile, float32 and
bfloat16. Needs transformers (the tierkit-torch[transformers] extra)."""

from __future__ import annotations

import importlib.util
import json
import textwrap

from ._common import Config, Skip, in_case, need, pick, table, target, thp_probe_rows, timed, timed_rows

TITLE = "Models: patched against stock, eager and compiled"

# What one measurement shares (stock and patched, paired): settle.py measures a case again alone.
CASE_FIELDS = ("model", "cell", "how", "dtype")

PROBE = textwrap.dedent("""
    import copy, json, os, sys, time, warnings
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch, tierkit_torch
    import transformers
    from torch._dynamo.utils import counters
    from tierkit.bench.timing import inner_for, interleaved, paired_ratio
    from tierkit.bench.settle import case_wanted
    reps, quick, with_compile = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
    only = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None  # the cases measured again (settle.py)
    wanted = lambda **key: case_wanted(only, key)
    warnings.simplefilter("ignore")
    h = 256 if quick else 512
    base = dict(hidden_size=h, intermediate_size=h * 11 // 4, num_hidden_layers=2 if quick else 4,
                num_attention_heads=8, num_key_value_heads=4, vocab_size=2048 if quick else 8192,
                max_position_embeddings=1024, head_dim=h // 8)
    prefill = 64 if quick else 256
    ALL_CELLS = ("prefill", "decode", "train")
    # (label, transformers model type, config, tokens a prefill and in the KV cache, cells)
    FAMILIES = [("llama", "llama", base, prefill, ALL_CELLS), ("qwen3", "qwen3", base, prefill, ALL_CELLS)]
    if not quick:
        # Where models run (#54 goal 5): a Llama-shaped model of 0.49 B parameters, prefill of 512
        # tokens and a decode step against 512 cached ones (no training step: minutes at this size).
        big = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=32,
                   num_key_value_heads=8, vocab_size=32000, max_position_embeddings=2048, head_dim=64)
        FAMILIES.append(("llama-0.5b", "llama", big, 512, ("prefill", "decode")))
    SHARE_REPS = 3  # the median of 3 calls (5 cost 4 more 0.5 B prefills a case, 16 s in float32)

    # Seconds inside each group of modules ({group: names}) and the call's own, the call with the
    # median time of SHARE_REPS: forward hooks, eager only, timed apart from the paired figures
    # (a hook costs a Python frame).
    def inside(model, groups, call):
        spent, start, hooks = {}, {}, []
        for n, mod in model.named_modules():
            for group, names in groups.items():
                if n in names:
                    hooks.append(mod.register_forward_pre_hook(lambda m, a, n=n: start.__setitem__(n, time.perf_counter())))
                    hooks.append(mod.register_forward_hook(
                        lambda m, a, o, n=n, g=group: spent.__setitem__(g, spent[g] + time.perf_counter() - start[n])))
        try:
            samples = []
            for _ in range(SHARE_REPS):
                spent.update({g: 0.0 for g in groups})
                t0 = time.perf_counter()
                call()
                samples.append((time.perf_counter() - t0, dict(spent)))
        finally:
            for h in hooks:
                h.remove()
        samples.sort(key=lambda st: st[0])
        return samples[len(samples) // 2]

    rows = []
    # Every model here runs the same classes' code, so dynamo keeps one cache
    # per forward for all of them: at its default limit (8 entries) it stopped
    # compiling after the first family and dtype and ran the later "compiled"
    # cells eagerly (their "graphs compiled" read 0). Each family and dtype
    # starts from an empty cache, with room for its stock and patched graphs.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    for label, family, kw, tokens, cells in FAMILIES:
        for dtype in (torch.float32, torch.bfloat16):
            dtype_name = str(dtype).removeprefix("torch.")
            if not wanted(model=label, dtype=dtype_name):
                continue
            torch._dynamo.reset()
            torch.manual_seed(0)
            stock = transformers.AutoModelForCausalLM.from_config(
                transformers.CONFIG_MAPPING[family](**kw), dtype=dtype).eval()
            ours = copy.deepcopy(stock)
            tierkit_torch.patch(ours)
            models = {"stock": stock, "patched": ours}
            replaced = tierkit_torch.models.patched_modules(ours)
            norms = {n for n, kind in replaced.items() if kind == "norm"}
            acts = {f"{n}.act_fn" for n, kind in replaced.items() if kind == "mlp" and hasattr(stock.get_submodule(n), "act_fn")}
            g = torch.Generator().manual_seed(1)
            ids = torch.randint(0, kw["vocab_size"], (1, tokens), generator=g)
            tok = torch.randint(0, kw["vocab_size"], (1, 1), generator=g)
            train_ids = torch.randint(0, kw["vocab_size"], (2, tokens // 2), generator=g)
            impls = {}
            for name, m in models.items():
                fwd = {"eager": m}
                if with_compile:
                    fwd["compiled"] = torch.compile(m)
                # A KV cache of `tokens` tokens, shared by the model's eager and compiled decode (each
                # call crops it back): one prefill less a model (4 s in float32 at 0.5 B, 2 cores).
                # One decode step and crop first, so every compiled decode meets a cache already cropped
                # once, whichever cells run (settle.py measures one case alone): a fresh cache cost
                # dynamo a second graph on the call after its first crop.
                cache = m(ids, use_cache=True).past_key_values
                with torch.no_grad():
                    m(tok, past_key_values=cache, use_cache=True)
                cache.crop(-1)
                for how, f in fwd.items():
                    def prefill_call(f=f):
                        with torch.no_grad():
                            return f(ids, use_cache=False).logits
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
            for cell in cells:
                for how in (("eager", "compiled") if with_compile else ("eager",)):
                    if not wanted(model=label, cell=cell, how=how, dtype=dtype_name):
                        continue
                    case_start = time.perf_counter()  # the case's seconds: what measuring it again costs (settle.py)
                    pair = {n: impls[(cell, how, n)] for n in ("stock", "patched")}
                    compiled = {}
                    for n, fn in pair.items() if how == "compiled" else ():
                        # compile before timing; count what dynamo did (graphs, breaks, recompiles).
                        # (Eager cells warm up in interleaved() alone: three calls more a model cost
                        # 24 s of the 0.5 B float32 prefill's 126.)
                        counters.clear()
                        fn(); fn()
                        compiled[n] = {"graph_breaks": sum(counters["graph_break"].values()),
                                       "graphs": counters["stats"]["unique_graphs"]}
                        fn()
                        compiled[n]["graphs_after_warmup"] = counters["stats"]["unique_graphs"] - compiled[n]["graphs"]
                    # Cells of milliseconds a call get more pairs: as many as fit in 0.6 s x the
                    # run's count (4.2 s at 7; twice that when settle.py measures again), at most
                    # 6x it; their medians moved by a few percent between runs of 7 pairs. A 0.5 B
                    # prefill (seconds a call) keeps `reps`.
                    fill = 0.0 if quick else 0.6 * reps
                    s = interleaved(pair, reps, 1, warmup=1, fill_seconds=fill, max_reps=6 * reps)
                    share = {}
                    if how == "eager" and cell != "train":
                        # What "level" is made of: stock's time in the modules tierkit replaces
                        # (norms, MLP activations; rotary runs inside attention, not separated),
                        # and the norms' own time in each model.
                        total, theirs = inside(stock, {"norms": norms, "acts": acts}, pair["stock"])
                        _, mine = inside(ours, {"norms": norms}, pair["patched"])
                        share = {"replaced_share": (theirs["norms"] + theirs["acts"]) / total,
                                 "norms_share": theirs["norms"] / total,
                                 "norms_speedup": theirs["norms"] / mine["norms"] if mine["norms"] > 0 else None}
                    case_seconds = time.perf_counter() - case_start
                    for n, t in s.items():
                        rows.append({"model": label, "case_seconds": case_seconds, "cell": cell, "how": how, "impl": n,
                                     "dtype": dtype_name, "seconds": t.seconds, "pairs": len(t.seconds),
                                     "ours_over_theirs": paired_ratio(t, s["patched"]),
                                     **(compiled[n] if how == "compiled" else {}),
                                     **(share if n == "stock" else {})})
    print(json.dumps(rows))
""")


def measure(cfg: Config) -> list[dict]:
    need("torch")
    need("tierkit_torch")
    if importlib.util.find_spec("transformers") is None:
        raise Skip("transformers is not installed (the tierkit-torch[transformers] extra)")
    args = [str(cfg.reps), "1" if cfg.quick else "0", "0" if cfg.quick else "1"]
    if cfg.only is not None:
        args.append(json.dumps(cfg.only))
    return thp_probe_rows("models", PROBE, args, "models", timeout=3600)


def markdown(results: dict) -> list[str]:
    rows = timed_rows(results, "models")
    counted = any("graphs" in r for r in rows)
    # Runs since 2026-12-07 record their pairs (full runs fill cells of milliseconds with more).
    paired = any("pairs" in r for r in rows)
    return [
        table(
            ["model", "cell", "eager or compiled", "dtype", "stock", "patched", "patched's speed-up"]
            + (["pairs"] if paired else []),
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
                + ([str(r.get("pairs", ""))] if paired else [])
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
        "eager attention as configured by default; the speed-up is paired per repetition"
        + (
            " (pairs: how many; full runs give a cell as many as fit in 0.6 s x the run's count, at most 6x it, so "
            "cells of milliseconds get more)"
            if paired
            else ""
        )
        + "; torch's thread count. llama-0.5b (full runs only): 491,816,960 parameters (hidden 2048, 8 layers, 32 heads (8 KV), "
        "intermediate 5632, vocab 32000), prefill 1 x 512, decode against 512 cached tokens, no training step.",
        *_share_table(rows),
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
                "Counted by torch._dynamo's counters over each compiled model's two warm-up calls of the cell, then over "
                "a third call (recompiles after warm-up). A decode cell's calls use a KV cache already cropped back "
                "once: one graph (a fresh cache compiled a second one on the call after its first crop).",
            ]
            if counted
            else []
        ),
    ]


def _share_table(rows: list[dict]) -> list[str]:
    """Per eager cell: how much of stock's time tierkit's replacements can move at all."""
    shared = [r for r in rows if r["impl"] == "stock" and "replaced_share" in r]
    if not shared:
        return []
    return [
        "",
        table(
            [
                "model",
                "cell",
                "dtype",
                "stock's time in replaced modules",
                "in its norms",
                "norms' own speed-up",
            ],
            [
                [
                    r["model"],
                    r["cell"],
                    r["dtype"],
                    f"{100 * r['replaced_share']:.1f} %",
                    f"{100 * r['norms_share']:.1f} %",
                    "—" if r["norms_speedup"] is None else f"{r['norms_speedup']:.2f}x",
                ]
                for r in shared
            ],
        ),
        "",
        "Eager, by forward hooks (median of 3 calls, timed apart from the paired figures): the norm modules and the "
        "MLPs' activation modules tierkit replaces; rotary runs inside attention and is not separated, and the "
        "MLP's product by up_proj is not a module. A patched model can be ahead of stock by at most about that "
        "share; where it is a few percent, level is what to expect.",
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
        out += in_case([target(name, 1.0, ratio, ratio >= 1.0)], {f: r[f] for f in CASE_FIELDS})
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
