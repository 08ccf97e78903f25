"""The model suites' families: a tiny random-init config of each (no
download), with non-trivial norm weights, built fresh for each test."""

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
CONFIGS = {
    "llama": TINY,
    "mistral": TINY,
    "qwen2": TINY,
    "qwen3": dict(TINY, head_dim=16),
    # Phi-3 rotates half of each head (partial_rotary_factor 0.5).
    "phi3": dict(
        TINY, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    ),
    "gemma": dict(TINY, head_dim=16),
    "gemma2": dict(TINY, head_dim=16),
    "gemma3_text": dict(TINY, head_dim=16),
    "gpt2": dict(
        n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64, bos_token_id=1, eos_token_id=2
    ),
}
FAMILIES = list(CONFIGS)


def stock_model(family: str, dtype=torch.float32):
    torch.manual_seed(0)
    cfg = transformers.CONFIG_MAPPING[family](**CONFIGS[family])
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype)
    with torch.no_grad():  # norm weights away from their init (1, or 0 for Gemma's 1 + w)
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name or name.startswith("transformer.ln_"):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)).to(p.dtype) * 0.2)
    return model.eval()


def pair(family: str, dtype=torch.float32):
    stock = stock_model(family, dtype)
    return stock, copy.deepcopy(stock)


def ids(batch=2, seq=9, seed=3):
    return torch.randint(3, 128, (batch, seq), generator=torch.Generator().manual_seed(seed))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sweep: test_sweep.py's model types (every causal-LM type with -m sweep; a sample without)"
    )
