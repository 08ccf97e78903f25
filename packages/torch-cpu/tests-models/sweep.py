"""The sweep over every causal-LM model type of the installed transformers
(issue 52, point 3): each built from a tiny config, patched by
``tierkit_torch.patch`` on a deepcopy and compared with the stock model.

``run(model_type)`` returns one record (a dict); ``test_sweep.py`` asserts
on it, and ``python sweep.py [--out DIR] [TYPE ...]`` runs the sweep outside
pytest and writes the table (``sweep-<cell>.md`` and ``.json``).

A type that cannot be built tiny (its config, its model, or its stock
forward fail on the tiny config; a package it needs; remote code) is
recorded as skipped with the reason, never raised. Once the stock model
runs, everything after the patch is the patch's doing: a patched forward
that raises, logits off by more than 1e-5 relative in fp32, or greedy
tokens that differ, is a failure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, VOCAB = 64, 2, 4, 2, 128, 128
FP32_TOL = 1e-5  # max abs diff / max abs stock
NEW_TOKENS = 4

# Every name a config of transformers uses for one of the tiny sizes; only
# those the config has are set (through its constructor, so derived fields,
# layer_types included, follow).
SIZES = {
    "hidden_size": HIDDEN,
    "n_embd": HIDDEN,
    "d_model": HIDDEN,
    "dim": HIDDEN,
    "embed_dim": HIDDEN,
    "num_hidden_layers": LAYERS,
    "n_layer": LAYERS,
    "n_layers": LAYERS,
    "num_layers": LAYERS,
    "decoder_layers": LAYERS,
    "encoder_layers": LAYERS,
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "encoder_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "n_kv_heads": KV_HEADS,
    "num_kv_heads": KV_HEADS,
    "multi_query_group_num": KV_HEADS,
    "intermediate_size": INTERMEDIATE,
    "n_inner": INTERMEDIATE,
    "ffn_dim": INTERMEDIATE,
    "decoder_ffn_dim": INTERMEDIATE,
    "encoder_ffn_dim": INTERMEDIATE,
    "ffn_hidden_size": INTERMEDIATE,
    "vocab_size": VOCAB,
    "head_dim": HIDDEN // HEADS,
    # mixture of experts: few, small experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "moe_topk": 2,
    "top_k": 2,
    "n_group": 1,
    "topk_group": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    # multi-head latent attention (DeepSeek-style)
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    # state-space and linear-attention layers
    "mamba_d_state": 8,
    "mamba_n_heads": 4,
    "mamba_d_head": 32,
    "mamba_expand": 2,
    "state_size": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "rotary_dim": 8,  # GPT-J, CodeGen: the rotated part of a 16-wide head
    "hidden_size_per_layer_input": 16,  # Gemma 3n/4's per-layer inputs
    "vocab_size_per_layer_input": VOCAB,
    # positions and windows: small
    "max_position_embeddings": 64,
    "n_positions": 64,
    "n_ctx": 64,
    "sliding_window": 8,
    "max_window_layers": LAYERS,
    # token ids inside the tiny vocabulary
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
}
# What one type needs beyond the sizes above (its config checks them).
EXTRA = {
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "mamba2": {"num_heads": 8},  # hidden 64 x expand 2 == heads x head_dim 16
    "zaya": {"num_experts_per_tok": 1},
    "dots3_note_text": {"num_key_value_heads": HEADS},
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
}
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "decoder", "encoder", "depth_decoder_config")


def _has(cfg, key: str) -> bool:
    return key in cfg.to_dict() or key in getattr(cfg, "attribute_map", {})


def tiny_config(model_type: str):
    """The type's config with every size above it knows set small; its sub-configs (text, vision, audio) too."""
    import transformers

    cls = transformers.CONFIG_MAPPING[model_type]
    default = cls()
    kwargs = {k: v for k, v in SIZES.items() if _has(default, k)}
    if "kv_lora_rank" in kwargs:  # MLA: as many key heads as query heads, the rotary's width is head_dim
        kwargs.update(
            {k: HEADS for k in ("num_key_value_heads", "n_kv_heads", "num_kv_heads") if k in kwargs}
        )
        if "head_dim" in kwargs:
            kwargs["head_dim"] = kwargs["qk_rope_head_dim"]
    kwargs.update(EXTRA.get(model_type, {}))
    for sub in SUB_CONFIGS:
        sub_cfg = getattr(default, sub, None)
        if isinstance(sub_cfg, transformers.PretrainedConfig):
            sub_kwargs = {k: v for k, v in SIZES.items() if _has(sub_cfg, k)}
            sub_types = getattr(sub_cfg, "layer_types", None)
            if isinstance(sub_types, list) and not isinstance(
                getattr(type(sub_cfg), "layer_types", None), property
            ):
                sub_kwargs["layer_types"] = _pick_layers(sub_types)
            kwargs[sub] = {**{k: v for k, v in sub_cfg.to_dict().items() if k != "layer_types"}, **sub_kwargs}
    layer_types = getattr(default, "layer_types", None)
    settable = not isinstance(getattr(cls, "layer_types", None), property)
    if settable and isinstance(layer_types, list) and len(layer_types) > LAYERS:
        kwargs["layer_types"] = _pick_layers(layer_types)
    # what a config refuses (a layer pattern it derives itself, a sub-config
    # it checks) is dropped, in this order, until it builds
    attempts = [kwargs, {k: v for k, v in kwargs.items() if k != "layer_types"}]
    attempts.append({k: v for k, v in attempts[-1].items() if k not in SUB_CONFIGS})
    for i, kw in enumerate(attempts):
        try:
            return cls(**kw)
        except Exception:
            if i == len(attempts) - 1:
                raise
    raise AssertionError("unreachable")


def _pick_layers(layer_types: list) -> list:
    """Two layers, of two different kinds where the model has several (full and sliding, attention and mamba)."""
    first = layer_types[0]
    other = next((t for t in layer_types if t != first), first)
    return [first, other][:LAYERS]


def _perturb(model: torch.nn.Module) -> None:
    """Norm weights away from their init (1, or 0 for an offset of 1): a probe that is wrong shows."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            low = name.lower()
            if p.dim() == 1 and ("norm" in low or ".ln" in low or low.startswith("ln")):
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.2)


MAX_PARAMS = 20_000_000  # what a tiny config still leaves large (a default size no name above reaches)


def build(model_type: str):
    import transformers

    cfg = tiny_config(model_type)
    with torch.device("meta"):  # its size first, without memory
        n = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"{n / 1e6:.0f}M parameters on the tiny config (some size has another name)")
    torch.manual_seed(0)
    try:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    except (ValueError, TypeError) as e:
        if "eager" not in str(e) and "attn_implementation" not in str(e):
            raise
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    _perturb(model)
    return model.float().eval()


def _vocab(model: torch.nn.Module) -> int:
    emb = model.get_input_embeddings()
    n = getattr(emb, "num_embeddings", None) or getattr(getattr(emb, "weight", None), "shape", [VOCAB])[0]
    return min(int(n), VOCAB)


def _logits(model, x) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=x, use_cache=False)
    logits = out.logits if hasattr(out, "logits") else out[0]
    return logits.float()


def _generate(model, x):
    with torch.no_grad():
        return model.generate(
            x, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).pow(2).mean().sqrt() / b.double().pow(2).mean().sqrt()).item()


def _why(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg[:160]}"


def run(model_type: str) -> dict:
    """One type's record: 'status' is 'skipped' (with 'reason'), 'equal' or 'wrong' (with 'reason')."""
    import tierkit_torch
    from tierkit_torch.models import patched_modules

    t0 = time.perf_counter()
    rec: dict = {"type": model_type}

    def done(status: str, reason: str = "") -> dict:
        rec.update(status=status, reason=reason, seconds=round(time.perf_counter() - t0, 2))
        return rec

    # ---- stock: anything that fails here is the type's, not tierkit's
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stock = build(model_type)
        rec["class"] = type(stock).__name__
        vocab = _vocab(stock)
        x = torch.randint(3, vocab, (2, 9), generator=torch.Generator().manual_seed(3))
        want = _logits(stock, x)
    except ImportError as e:
        return done("skipped", "needs a package: " + _why(e))
    except Exception as e:
        return done("skipped", "not buildable tiny: " + _why(e))
    if not torch.isfinite(want).all():
        return done("skipped", "stock logits not finite on the tiny config")
    try:
        gen_want = _generate(stock, x[:1])
    except Exception as e:
        gen_want, rec["generate"] = None, "stock cannot generate: " + _why(e)

    # ---- patched: from here on a failure is tierkit's
    model = copy.deepcopy(stock)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            counts = tierkit_torch.patch(model)
        rec["left_alone"] = [str(w.message) for w in caught if "tierkit_torch.patch" in str(w.message)]
        rec.update(norm=counts["norm"], mlp=counts["mlp"], rotary=counts["rotary"])
        rec["replaced"] = sum(counts.values())
        kinds = list(patched_modules(model).values())
        assert sorted(kinds) == sorted(k for k, n in counts.items() for _ in range(n)), (kinds, counts)
        got = _logits(model, x)
    except Exception as e:
        return done("wrong", "patched model fails: " + _why(e))
    rec["fp32_rel"] = rel(got, want)
    if not rec["fp32_rel"] <= FP32_TOL:
        # fp32's own rounding, amplified by the model (CPMAnt's stock logits are
        # 1.6e-5 from its float64 ones, patched 1.6e-5), or a module computed otherwise? Against
        # the float64 model, patched must stay within 3x stock's own error, and
        # 1e-4: a wrong casting mode, offset or rotary is off by 1e-3 and more.
        ref = _logits(copy.deepcopy(stock).double(), x)
        rec["fp64_stock"], rec["fp64_patched"] = rel(want, ref), rel(got, ref)
        if not (rec["fp64_patched"] <= 3 * rec["fp64_stock"] and rec["fp32_rel"] <= 1e-4):
            return done("wrong", f"fp32 logits off by {rec['fp32_rel']:.2e} relative")
        rec["note"] = (
            f"fp32 {rec['fp32_rel']:.1e} from stock: stock itself is {rec['fp64_stock']:.1e} from "
            f"its float64 model, patched {rec['fp64_patched']:.1e}"
        )
    if gen_want is not None:
        try:
            gen_got = _generate(model, x[:1])
        except Exception as e:
            return done("wrong", "patched generate fails: " + _why(e))
        rec["generate"] = "equal" if torch.equal(gen_got, gen_want) else "differs"
        if rec["generate"] != "equal":
            return done("wrong", f"greedy tokens differ: {gen_got.tolist()} vs {gen_want.tolist()}")

    # ---- bfloat16: each against the fp32 stock model, recorded (stock's own error is the yardstick)
    xb = torch.randint(3, vocab, (4, 16), generator=torch.Generator().manual_seed(11))
    try:
        exact = _logits(stock, xb)
        stock_b, model_b = stock.to(torch.bfloat16), model.to(torch.bfloat16)
        rec["bf16_stock"] = rms(_logits(stock_b, xb), exact)
    except Exception as e:
        rec["bf16"] = "stock does not run in bfloat16: " + _why(e)
        return done("equal")
    try:
        rec["bf16_patched"] = rms(_logits(model_b, xb), exact)
    except Exception as e:
        return done("wrong", "patched model fails in bfloat16: " + _why(e))
    return done("equal")


# ---------------------------------------------------------------- the table


def cell_name() -> str:
    import transformers

    kernels = "none"
    try:
        import kernels as k

        kernels = getattr(k, "__version__", "?")
    except ImportError:
        pass
    cell = os.environ.get("TIERKIT_MODELS_CELL", "")
    return f"{cell + ': ' if cell else ''}transformers {transformers.__version__}, kernels {kernels}, torch {torch.__version__}"


def table(records: list[dict]) -> str:
    recs = sorted(records, key=lambda r: r["type"])
    built = [r for r in recs if r["status"] != "skipped"]
    patched = [r for r in built if r.get("replaced")]
    equal = [r for r in built if r["status"] == "equal"]
    lines = [
        f"Swept {len(recs)} causal-LM model types ({cell_name()}): {len(built)} built tiny, "
        f"{len(patched)} with at least one module replaced, {len(equal)} equal to stock, "
        f"{len(built) - len(equal)} wrong, {len(recs) - len(built)} skipped.",
        "",
        "| model type | class | replaced (norm, mlp, rotary) | fp32 vs stock | bf16: stock | bf16: patched | greedy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in built:
        bf_s = f"{r['bf16_stock']:.2e}" if "bf16_stock" in r else "n/a"
        bf_p = f"{r['bf16_patched']:.2e}" if "bf16_patched" in r else "n/a"
        fp = f"{r['fp32_rel']:.1e}" if "fp32_rel" in r else "n/a"
        gen = r.get("generate", "")
        gen = "equal" if gen == "equal" else ("n/a" if gen.startswith("stock cannot") else gen)
        counts = f"{r.get('norm', '-')}, {r.get('mlp', '-')}, {r.get('rotary', '-')}"
        if r["status"] == "wrong":
            counts += f" — **wrong: {r['reason']}**"
        lines.append(f"| {r['type']} | {r.get('class', '')} | {counts} | {fp} | {bf_s} | {bf_p} | {gen} |")
    skipped = [r for r in recs if r["status"] == "skipped"]
    if skipped:
        lines += ["", "Skipped (stock cannot be built or run tiny here):", ""]
        lines += [f"- {r['type']}: {r['reason'].replace('|', '/')}" for r in skipped]
    return "\n".join(lines) + "\n"


def write(records: list[dict], out: Path, suffix: str = "") -> Path:
    """The table (``sweep-<cell><suffix>.md``) and the records (``.json``) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"sweep-{os.environ.get('TIERKIT_MODELS_CELL') or 'local'}{suffix}"
    (out / f"{name}.json").write_text(json.dumps(sorted(records, key=lambda r: r["type"]), indent=1))
    path = out / f"{name}.md"
    path.write_text(table(records))
    return path


def all_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("types", nargs="*", help="model types (default: every causal-LM type)")
    ap.add_argument("--out", type=Path, default=Path("build/models-sweep"))
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    records = []
    t0 = time.perf_counter()
    for t in a.types or all_types():
        r = run(t)
        records.append(r)
        print(f"{t:28s} {r['status']:8s} {r.get('norm', '-')},{r.get('mlp', '-')},{r.get('rotary', '-')} "
              f"{r.get('fp32_rel', float('nan')):.1e} {r['seconds']:6.2f}s {r['reason'][:100]}", flush=True)  # fmt: skip
    path = write(records, a.out)
    print(f"{len(records)} types in {time.perf_counter() - t0:.0f} s; table: {path}")
    return 1 if any(r["status"] == "wrong" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
