"""Issue 52's items, in each cell (the oldest and newest transformers/kernels
pair): transformers' hub decorators on; the rotary found through the
attention's wrapped forward (1); no class changed (2, with
test_patch.py's kernelize test); patches kept through pickle, torch.save,
copies, and patching again patches what is stock (3); a kernelized model
pickles and stays kernelized (4); wrappers (5); families told apart by what
their modules compute (6, 7)."""

import copy
import io
import os
import pickle
import warnings

import pytest
import tierkit_torch
import torch
from conftest import TINY, ids, pair, transformers
from tierkit_torch.models import patched_modules

CELL = os.environ.get("TIERKIT_MODELS_CELL", "?")
SOME = ["llama", "phi3", "gemma3_text", "gpt2"]


def quiet_patch(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tierkit_torch.patch(model)


def logits(model, x=None):
    with torch.no_grad():
        return model(ids() if x is None else x).logits


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def test_transformers_hub_decorators_are_on():
    """The cell's pair is one transformers accepts: its hub decorators are on
    (the attention's forward is kernels' wrapper), so item 1's case is real."""
    from transformers.models.llama import modeling_llama
    from transformers.utils.import_utils import is_kernels_available

    assert is_kernels_available(), CELL
    assert hasattr(modeling_llama.LlamaAttention.forward, "__wrapped__")
    assert type(modeling_llama.apply_rotary_pos_emb).__name__ == "Func"


@pytest.mark.parametrize(
    "family", ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text"]
)
def test_rotary_replaced_through_the_wrapped_forward(family):
    _, model = pair(family)
    counts = quiet_patch(model)
    assert counts["rotary"] == 2, counts
    attentions = [m for m in model.modules() if patched_modules(m).get("") == "rotary"]
    assert len(attentions) == 2
    for m in attentions:
        site = tierkit_torch.models._rotary_site(m.forward)
        assert site.__globals__["apply_rotary_pos_emb"] is tierkit_torch.models.apply_rotary_pos_emb
    # the class's own forward still reads transformers' function
    cls_site = tierkit_torch.models._rotary_site(type(attentions[0]).forward)
    assert cls_site.__globals__["apply_rotary_pos_emb"] is not tierkit_torch.models.apply_rotary_pos_emb


def test_patch_changes_no_class_and_no_other_model():
    stock, model = pair("llama")
    classes = {type(m) for m in model.modules()}
    before = {c: dict(vars(c)) for c in classes}
    quiet_patch(model)
    assert {c: dict(vars(c)) for c in classes} == before
    assert patched_modules(stock) == {}


def _torch_save(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


COPIES = {
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "torch.save": _torch_save,
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("family", SOME)
def test_patch_survives_pickle_and_copies(family, how):
    stock, model = pair(family)
    counts = quiet_patch(model)
    kinds = patched_modules(model)
    clone = COPIES[how](model)
    assert patched_modules(clone) == kinds
    for m in clone.modules():  # each forward is the copy's own
        f = m.__dict__.get("forward")
        assert f is None or f.__self__ is m
    x = ids()
    assert rel(logits(clone, x), logits(stock, x)) <= 1e-5
    assert quiet_patch(clone) == counts  # patching again: the same, nothing twice
    assert patched_modules(clone) == kinds


def test_patching_again_patches_what_is_stock_not_what_a_flag_says():
    stock, model = pair("llama")
    counts = quiet_patch(model)
    norm = model.model.norm
    del norm.__dict__["forward"]  # a patch lost (a copy made without it)
    norm.__dict__["_tierkit_patched"] = "norm"  # and a stale flag of the old releases
    assert "model.norm" not in patched_modules(model)
    assert quiet_patch(model) == counts
    assert patched_modules(model)["model.norm"] == "norm"
    x = ids()
    assert rel(logits(model, x), logits(stock, x)) <= 1e-5


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("family", SOME)
def test_kernelized_model_pickles_and_stays_kernelized(family, how):
    pytest.importorskip("kernels")
    import tierkit_torch.hub as hub

    stock, model = pair(family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hub.kernelize(model)
    kinds = patched_modules(model)
    assert kinds
    clone = COPIES[how](model)
    assert patched_modules(clone) == kinds
    x = ids()
    assert rel(logits(clone, x), logits(stock, x)) <= 1e-5


class MyLlamaForCausalLM(transformers.LlamaForCausalLM):
    """A user's subclass of a family's class."""


def test_wrappers_subclass_peft_and_compiled():
    stock, _ = pair("llama")
    sub = MyLlamaForCausalLM(stock.config).eval()
    sub.load_state_dict(stock.state_dict())
    assert quiet_patch(sub) == {"norm": 5, "mlp": 2, "rotary": 2}
    x = ids()
    assert rel(logits(sub, x), logits(stock, x)) <= 1e-5
    assert patched_modules(pickle.loads(pickle.dumps(sub))) == patched_modules(sub)

    compiled = torch.compile(copy.deepcopy(stock))
    with pytest.raises(ValueError, match=r"_orig_mod"):
        tierkit_torch.patch(compiled)
    assert quiet_patch(compiled._orig_mod) == {"norm": 5, "mlp": 2, "rotary": 2}


def test_peft_model_is_patched_through_its_base_model():
    peft = pytest.importorskip("peft", reason="peft is not installed: the PEFT case is not run")
    stock, model = pair("llama")
    wrapped = peft.get_peft_model(
        model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj", "gate_proj"])
    )
    assert quiet_patch(wrapped) == {"norm": 5, "mlp": 2, "rotary": 2}
    x = ids()
    assert rel(logits(wrapped, x), logits(stock, x)) <= 1e-5  # LoRA's B starts at zero
    wrapped.train()
    out = wrapped(x, labels=x)
    out.loss.backward()
    assert all(p.grad is not None for n, p in wrapped.named_parameters() if p.requires_grad)


def _tiny(model_type, dtype=torch.float32, **extra):
    torch.manual_seed(0)
    cfg = transformers.CONFIG_MAPPING[model_type](**dict(TINY, **extra))
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype).eval()


OTHERS = {
    # one-tensor rotary (apply_rotary_pos_emb(x, cos, sin)): not Gemma 3's, whatever the name says
    "gemma3n_text": dict(
        head_dim=16, hidden_size_per_layer_input=8, vocab_size_per_layer_input=128, num_kv_shared_layers=0,
        activation_sparsity_pattern=[0.0, 0.0], laurel_rank=4, altup_num_inputs=2, intermediate_size=[128, 128],
        layer_types=["sliding_attention", "full_attention"],
    ),
    "gemma4_text": dict(head_dim=16),
    "cohere": {},  # interleaved rotary: tierkit's is half-split
    "olmo2": {},  # its rotary casts back to q's dtype
}  # fmt: skip
LEFT_ALONE = {
    "gemma3n_text": "Gemma3nTextAttention",
    "gemma4_text": "Gemma4TextAttention",
    "cohere": "CohereAttention",
    "olmo2": "Olmo2Attention",
}


@pytest.mark.parametrize("model_type", list(OTHERS))
def test_modules_told_apart_by_what_they_compute(model_type):
    """Items 6 and 7: these rotaries are left alone and named; the model
    equals stock in fp32 and runs in bfloat16, patched and kernelized."""
    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"{model_type} is not in transformers {transformers.__version__}")
    stock = _tiny(model_type, **OTHERS[model_type])
    model = copy.deepcopy(stock)
    with pytest.warns(UserWarning, match=LEFT_ALONE[model_type]):
        counts = tierkit_torch.patch(model)
    assert counts["rotary"] == 0 and counts["norm"] + counts["mlp"] > 0, counts
    x = ids()
    assert rel(logits(model, x), logits(stock, x)) <= 1e-5
    with torch.no_grad():
        a, b = stock.to(torch.bfloat16)(x).logits, model.to(torch.bfloat16)(x).logits
    assert b.dtype == a.dtype and rel(b.float(), a.float()) <= 5e-2
    pytest.importorskip("kernels")
    import tierkit_torch.hub as hub

    stock, model = _tiny(model_type, **OTHERS[model_type]), _tiny(model_type, **OTHERS[model_type])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hub.kernelize(model)
    assert rel(logits(model, x), logits(stock, x)) <= 1e-5
