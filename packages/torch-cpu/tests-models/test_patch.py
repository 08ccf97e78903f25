"""tierkit in real transformers model code, every family of docs/models.md,
both ways (``tierkit_torch.patch`` and ``kernels.kernelize`` with
``tierkit_torch.hub``'s layers), each against the same model unpatched:
values (fp32, bfloat16, autocast), a training step's loss and gradients,
greedy generation, torch.compile(fullgraph=True), torch.export with a
dynamic batch, and the state dict untouched."""

import warnings

import pytest
import tierkit_torch
import torch
from conftest import FAMILIES, ids, pair

ROTARY = {f: f != "gpt2" for f in FAMILIES}


WAYS = ["patch", "kernelize"]


def patched(model, way="patch", mode=None):
    """tierkit put into `model`: by patch(), or by kernels.kernelize in `mode` (default: the model's)."""
    if way == "patch":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GPT-2's attention and MLP: named, left alone
            return tierkit_torch.patch(model)
    kernels = pytest.importorskip("kernels")
    import tierkit_torch.hub as hub

    if mode is None:
        mode = kernels.Mode.TRAINING if model.training else kernels.Mode.INFERENCE
    counts = hub.mark(model)
    hub.kernelize(model, mode=mode)
    # kernels falls back to the stock forward silently where a layer does not fit the mode: not here.
    assert any(k.startswith("kernels") for k in tierkit_torch.models.patched_modules(model).values()), mode
    return counts


def is_hub_layer(forward):
    return getattr(getattr(forward, "__func__", None), "__module__", "") == "tierkit_torch.hub.layers"


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def rms(a, b):
    return ((a.float() - b.float()).pow(2).mean().sqrt() / b.float().pow(2).mean().sqrt()).item()


@pytest.mark.parametrize("family", FAMILIES)
def test_counts_and_state_dict_unchanged(family):
    stock, model = pair(family)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    counts = patched(model)
    layers = 2
    assert counts["norm"] >= 2 * layers + 1, counts
    assert counts["rotary"] == (layers if ROTARY[family] else 0), counts
    assert counts["mlp"] == (0 if family == "gpt2" else layers), counts
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert patched(model) == counts  # twice is once
    stock.load_state_dict(after)  # checkpoints load both ways
    model.load_state_dict(stock.state_dict())


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_logits_and_greedy_generation(family, way):
    stock, model = pair(family)
    patched(model, way)
    x = ids()
    with torch.no_grad():
        assert rel(model(x).logits, stock(x).logits) <= 1e-5
    out_stock = stock.generate(x[:1], max_new_tokens=8, do_sample=False, pad_token_id=0)
    out_ours = model.generate(x[:1], max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(out_ours, out_stock)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", FAMILIES)
def test_training_step_loss_and_every_gradient(family, way):
    stock, model = pair(family)
    stock.train(), model.train()
    patched(model, way)
    x = ids()
    losses, grads = [], []
    for m in (stock, model):
        torch.manual_seed(5)  # the same dropout masks (GPT-2's) on both sides
        out = m(x, labels=x)
        out.loss.backward()
        losses.append(out.loss.item())
        grads.append({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
    assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0])
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert rel(grads[1][name], g) <= 1e-4, name


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", FAMILIES)
def test_bfloat16_no_worse_than_stock_and_autocast(family, way):
    """The RMS error of every logit of 8 x 32 tokens against the fp32 model (a
    maximum over one sample moves by tens of percent with the inputs; the RMS
    by about 1%): at most stock bfloat16's, within that 2%."""
    ref, _ = pair(family)
    x = ids(batch=8, seq=32, seed=11)
    with torch.no_grad():
        exact = ref(x).logits
    stock, model = pair(family)
    stock, model = stock.to(torch.bfloat16), model.to(torch.bfloat16)
    patched(model, way)
    with torch.no_grad():
        err_stock, err_ours = rms(stock(x).logits, exact), rms(model(x).logits, exact)
    assert err_ours <= err_stock * 1.02, (err_ours, err_stock)
    # float32 weights under bfloat16 autocast: runs, and matches stock under autocast.
    stock, model = pair(family)
    patched(model, way)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        a, b = stock(x).logits, model(x).logits
    assert rel(b, a) <= 2e-2, rel(b, a)
    assert rms(b, exact) <= rms(a, exact) * 1.02, (rms(b, exact), rms(a, exact))


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("family", FAMILIES)
def test_compile_fullgraph_and_export_dynamic_batch(family, way):
    _, model = pair(family)
    if way == "kernelize":
        kernels = pytest.importorskip("kernels")
        patched(model, way, kernels.Mode.INFERENCE | kernels.Mode.TORCH_COMPILE)
    else:
        patched(model, way)
    x = ids()
    with torch.no_grad():
        eager = model(x).logits
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x).logits, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids, use_cache=False).logits

    batch = torch.export.Dim("batch", min=1, max=16)
    ep = torch.export.export(Logits(model), (x,), dynamic_shapes=({0: batch},), strict=False)
    x3 = ids(batch=3, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x3), model(x3, use_cache=False).logits, rtol=1e-5, atol=1e-5)


def _graph_ops(model, x, dynamic=None):
    """The call_function targets of the one graph torch.compile(fullgraph=True) traces of `model`."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend, fullgraph=True, dynamic=dynamic)(x).logits
    torch._dynamo.reset()
    return out, seen


@pytest.mark.parametrize("given", ["norm", "mlp", "rotary"])
def test_compiled_choice_gives_a_kind_to_inductor_and_keeps_eager(given, monkeypatch):
    """COMPILED (models.py) gives one kind to Inductor: inside torch.compile
    that kind runs the module's stock forward (no tierkit op in the graph,
    no graph break: fullgraph), the others tierkit's ops; eager calls still
    run tierkit's op; a deepcopy keeps the choice; values are stock's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    op_of = {"norm": "rms_norm", "mlp": "silu_mul", "rotary": "rotary_embedding"}
    monkeypatch.setattr(tierkit_torch.models, "COMPILED", {given: "inductor"})
    stock, model = pair("llama")
    patched(model)
    x = ids()
    for m in (model, __import__("copy").deepcopy(model)):
        out, seen = _graph_ops(m, x)
        tierkit_ops = {k for k, name in op_of.items() if any(f"tierkit.{name}" in t for t in seen)}
        assert tierkit_ops == set(op_of) - {given}, (given, tierkit_ops)
        with torch.no_grad():
            torch.testing.assert_close(out, stock(x).logits, rtol=1e-5, atol=1e-5)

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(str(func))
            return func(*args, **(kwargs or {}))

    with Ops() as mode, torch.no_grad():
        model(x)
    assert any(op_of[given] in n for n in mode.names), sorted(mode.names)
    assert tierkit_torch.models.compiled_choice(given) == "inductor"
    monkeypatch.setattr(tierkit_torch.models, "COMPILED", {given: "xla"})
    with pytest.raises(ValueError, match=r'COMPILED\[.*\]: expected "tierkit" or "inductor".*, got .xla.'):
        tierkit_torch.models.compiled_choice(given)


def test_compiled_choice_by_rows_gives_small_calls_to_inductor(monkeypatch):
    """A number N in COMPILED (the MLP's default: 64): inside torch.compile a
    call of at most N rows (tokens) runs the module's stock forward, a larger
    one or a dynamic size tierkit's op (no guard on the dim), with no graph
    break and stock's values; a count for rotary (a forward of several
    tensors), 0 or a bool is refused."""
    monkeypatch.setattr(tierkit_torch.models, "COMPILED", {"mlp": 18})
    stock, model = pair("llama")
    patched(model)
    for batch, seq, tierkits in ((2, 9, False), (1, 18, False), (2, 10, True), (1, 19, True)):
        x = ids(batch, seq)
        out, seen = _graph_ops(model, x)
        assert any("tierkit.silu_mul" in t for t in seen) == tierkits, (batch, seq, seen)
        with torch.no_grad():
            torch.testing.assert_close(out, stock(x).logits, rtol=1e-5, atol=1e-5)
    _, seen = _graph_ops(model, ids(2, 9), dynamic=True)
    assert any("tierkit.silu_mul" in t for t in seen), seen
    assert tierkit_torch.models.compiled_choice("mlp") == 18
    for kind, bad, words in (
        ("rotary", 4, r'expected "tierkit" or "inductor", got 4'),
        ("mlp", 0, r'expected "tierkit" or "inductor" or a row count above 0, got 0'),
        ("norm", True, r'expected "tierkit" or "inductor" or a row count above 0, got True'),
    ):
        monkeypatch.setattr(tierkit_torch.models, "COMPILED", {kind: bad})
        with pytest.raises(ValueError, match=rf"COMPILED\[{kind!r}\]: {words}"):
            tierkit_torch.models.compiled_choice(kind)


def test_patched_forwards_are_shared_and_close_over_nothing():
    """Every module patched the same way runs one function object, the norms'
    and MLPs' with no closure: inside torch.compile dynamo guards each closure cell and each
    function on every instance's path, and a compiled call evaluates them all
    (the patched Llama's compiled decode step ran at 0.92x of stock's with a
    closure per instance; docs/models.md)."""
    _, model = pair("llama")
    patched(model)
    funcs = {}
    for name, module in model.named_modules():
        kind = tierkit_torch.models.patched_kind(module)
        if kind is None:
            continue
        f = module.forward.__func__
        # (an attention's forward is its class's own code, copied once with tierkit's rotary:
        # a decorator's wrapper keeps its closure)
        assert kind == "rotary" or f.__closure__ is None, name
        funcs.setdefault((kind, type(module)), set()).add(id(f))
    assert funcs and all(len(ids_) == 1 for ids_ in funcs.values()), funcs


@pytest.mark.parametrize("family", FAMILIES)
def test_kernelize_puts_tierkits_layers_in_and_changes_no_class(family):
    """Every norm and rotary function mark counted runs tierkit's layer after
    kernelize; no class of the model changed (item 2): another model of the
    same classes, kernelized afterwards with a mapping, gets that mapping."""
    kernels = pytest.importorskip("kernels")
    import tierkit_torch.hub as hub

    stock, model = pair(family)
    classes = {type(m) for m in model.modules()}
    before = {c: dict(vars(c)) for c in classes}
    counts = patched(model, "kernelize")
    assert counts["norm"] >= 5 and counts["rotary"] == (2 if ROTARY[family] else 0), counts
    after = {c: dict(vars(c)) for c in classes}
    assert after == before
    kinds = tierkit_torch.models.patched_modules(model)
    assert len(kinds) == counts["norm"] + counts["rotary"], kinds
    assert all(k.startswith("kernels") for k in kinds.values()), kinds
    # A second model of the same classes, unmarked, kernelized with the mapping: every module
    # transformers named gets its layer (a class-level condition set by mark kept them stock).
    named = [m for m in stock.modules() if getattr(type(m), "kernel_layer_name", None) == "RMSNorm"]
    with kernels.use_kernel_mapping(hub.mapping()):
        kernels.kernelize(stock, device="cpu", mode=kernels.Mode.INFERENCE)
    assert sum(is_hub_layer(m.__dict__.get("forward")) for m in stock.modules()) == len(named)
    assert family in ("gemma", "gemma2", "gemma3_text", "gpt2") or len(named) >= 5
