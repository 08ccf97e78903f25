"""tierkit inside a loaded Hugging Face transformers model, in one call:
``tierkit_torch.patch(model)`` (docs/models.md).

A module is replaced when a probe on small inputs shows that tierkit's op
gives the module's own result, value and dtype, not because of its class's
name: a norm (which casting mode, offset and eps attribute: tried in fp32,
bfloat16 and mixed), a gated MLP (SiLU or GELU-tanh gate, the fused or split
projections) and an attention's ``apply_rotary_pos_emb`` (fp32, bfloat16,
bfloat16 q with float32 tables). What fails its probe is left alone and
named in a warning. ``FAMILIES`` is only a table of hints for the docs.

Each replacement is the module instance's own ``forward``: parameters,
buffers, ``state_dict``, ``save_pretrained``, the model's classes and other
models in the process stay as they were. A patched module carries a
per-instance ``__reduce_ex__``, so ``pickle``, ``torch.save``/``torch.load``,
``copy.copy`` and ``copy.deepcopy`` give a module patched the same way (a
bound method alone pickles as ``getattr(module, "forward")``: the stock
one). Patching again finds what is actually patched by looking at the
forward, not at a flag.

transformers is never imported here, so ``import tierkit_torch`` does not
import it; it is the ``tierkit-torch[transformers]`` extra.
"""

from __future__ import annotations

import copy
import inspect
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["FAMILIES", "Family", "patch", "patched_modules"]


@dataclass(frozen=True)
class Family:
    """What the probes found in one transformers family (docs only: nothing is chosen by it)."""

    prefix: str
    casting_mode: str = "llama"
    offset: float = 0.0
    eps_attr: str = "variance_epsilon"
    fused_gate_up: bool = False
    layer_norm: bool = False


FAMILIES: tuple[Family, ...] = (
    Family("Llama"),
    Family("Mistral"),
    Family("Qwen2"),
    Family("Qwen3"),
    Family("Phi3", fused_gate_up=True),
    Family("Gemma", casting_mode="gemma", offset=1.0, eps_attr="eps"),
    Family("Gemma2", casting_mode="gemma", offset=1.0, eps_attr="eps"),
    Family("Gemma3", casting_mode="gemma", offset=1.0, eps_attr="eps"),
    Family("GPT2", layer_norm=True),
)

ROTARY_NAME = "apply_rotary_pos_emb"


# ---------------------------------------------------------------- wrappers


def unwrap_model(model: Any, who: str) -> torch.nn.Module:
    """The module to patch: a PEFT model's base model (its modules are the
    ones that run); a torch.compile'd module is refused, saying what to pass."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{who}: model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        raise ValueError(
            f"{who}: model: a torch.compile'd module: its graphs were traced with the stock forwards; "
            f"pass the module it wraps and compile again: {who.rsplit('.', 1)[-1]}(model._orig_mod); "
            "model = torch.compile(model._orig_mod)"
        )
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and type(model).__module__.startswith("peft"):
        return get_base()
    return model


# ---------------------------------------------------------------- forwards


def warn_skipped(who: str, skipped: dict[str, str], stacklevel: int = 3) -> None:
    """One warning naming each module left as it was, and why (patch and hub.mark)."""
    if skipped:
        warnings.warn(
            f"{who}: left as they were: " + "; ".join(f"{k} ({v})" for k, v in sorted(skipped.items())),
            stacklevel=stacklevel,
        )


# The patched forwards: one function object per spec, shared by every module
# given it, written out with the spec's values as literals (no closure) and
# calling the operators' overloads (torch.ops.tierkit.<op>.<overload>), not the
# typed faces. Inside torch.compile dynamo guards every closure cell, global and
# function it reads on each instance's path, and a compiled call evaluates all
# of those guards before it runs: a per-instance closure over the typed faces
# put the patched Llama's compiled decode step at 0.92x of stock's (guard
# evaluation 660 us against 411, docs/models.md "Under torch.compile").
_SHARED: dict[tuple, Any] = {}


def _once(key: tuple, make: Callable[[], Any]) -> Any:
    """make()'s result, made once per `key` and shared."""
    if key not in _SHARED:
        _SHARED[key] = make()
    return _SHARED[key]


def _shared(key: tuple, source: str, scope: dict[str, Any]) -> Any:
    """The function `source` defines (named ``forward``) over `scope`, made once per `key`."""

    def make() -> Any:
        namespace = dict(scope)
        exec(compile(source, f"<tierkit_torch patched forward: {key[0]}>", "exec"), namespace)
        return namespace["forward"]

    return _once(key, make)


def _overload(name: str, overload: str = "default") -> Any:
    from . import ops  # noqa: F401  (loads the operator library)

    return getattr(getattr(torch.ops.tierkit, name), overload)


def _norm_forward(mode: str, offset: float, eps_attr: str) -> Callable[..., Any]:
    if not eps_attr.isidentifier():
        raise ValueError(f"tierkit_torch.patch: eps attribute: expected an identifier, got {eps_attr!r}")
    if mode == "aten" and offset == 0.0:
        call = f"OP(hidden_states, self.weight, self.{eps_attr})"
        op = _overload("rms_norm")
    else:
        call = f"OP(hidden_states, self.weight, self.{eps_attr}, offset={float(offset)!r}, casting_mode={mode!r})"
        op = _overload("rms_norm", "casting")
    source = f"def forward(self, hidden_states):\n    return {call}\n"
    return _shared(("norm", mode, float(offset), eps_attr), source, {"OP": op})


def _layer_norm_forward() -> Callable[..., Any]:
    source = "def forward(self, x):\n    return OP(x, self.weight, self.bias, self.eps)\n"
    return _shared(("layer_norm",), source, {"OP": _overload("layer_norm")})


def _mlp_forward(gate: str, fused: bool, act_attr: str) -> Callable[..., Any]:
    op = _overload("silu_mul" if gate == "silu" else "gelu_tanh_mul")
    if fused:
        source = (
            "def forward(self, hidden_states):\n"
            "    g, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)\n"
            "    return self.down_proj(OP(g, up))\n"
        )
    else:
        source = "def forward(self, x):\n    return self.down_proj(OP(self.gate_proj(x), self.up_proj(x)))\n"
    return _shared(("mlp", gate, fused), source, {"OP": op})


def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> tuple[Any, Any]:
    """transformers' apply_rotary_pos_emb (partial width too: Phi-3's), on tierkit's op."""
    rotary = torch.ops.tierkit.rotary_embedding.default
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return rotary(q, cos, sin), rotary(k, cos, sin)


# ---------------------------------------------------------------- seeing through wrapped forwards


def _function(obj: Any) -> types.FunctionType | None:
    fn = getattr(obj, "__func__", obj)
    return fn if isinstance(fn, types.FunctionType) else None


def _closure_functions(fn: types.FunctionType) -> list[tuple[int, types.FunctionType]]:
    out = []
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        inner = _function(value)
        if inner is not None:
            out.append((i, inner))
    return out


def _rotary_site(forward: Any, depth: int = 0) -> types.FunctionType | None:
    """The function that reads the global ``apply_rotary_pos_emb``: `forward`
    itself or one it wraps (``__wrapped__``, a closure's cell: kernels'
    ``use_kernelized_func`` and transformers' decorators), or None."""
    fn = _function(forward)
    if fn is None or depth > 8:
        return None
    if ROTARY_NAME in fn.__code__.co_names and ROTARY_NAME in fn.__globals__:
        return fn
    for _, inner in _closure_functions(fn):
        found = _rotary_site(inner, depth + 1)
        if found is not None:
            return found
    wrapped = getattr(fn, "__wrapped__", None)
    return _rotary_site(wrapped, depth + 1) if wrapped is not None else None


def _copy_function(fn: types.FunctionType, scope: dict, closure: tuple | None) -> types.FunctionType:
    new = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    return new


def _with_rotary(forward: Any, replacement: Any, depth: int = 0) -> types.FunctionType | None:
    """`forward` (and every wrapper down to the function calling
    ``apply_rotary_pos_emb``) copied, the innermost over a copy of its
    module's globals with that one name replaced, the wrappers with the copy
    in their closure: the same code, seen by the instances given it only."""
    fn = _function(forward)
    if fn is None or depth > 8:
        return None
    if ROTARY_NAME in fn.__code__.co_names and ROTARY_NAME in fn.__globals__:
        scope = dict(fn.__globals__)
        scope[ROTARY_NAME] = replacement
        return _copy_function(fn, scope, fn.__closure__)
    for i, inner in _closure_functions(fn):
        new_inner = _with_rotary(inner, replacement, depth + 1)
        if new_inner is not None:
            cells = list(fn.__closure__ or ())
            cells[i] = types.CellType(new_inner)
            new = _copy_function(fn, fn.__globals__, tuple(cells))
            if getattr(fn, "__wrapped__", None) is not None:
                new.__dict__["__wrapped__"] = new_inner
            return new
    return None


_STOCK_ROTARY: dict[type, Any] = {}


def stock_rotary(attention_cls: Any) -> Callable[..., Any] | None:
    """The plain ``apply_rotary_pos_emb`` an attention class's forward calls
    (through kernels' ``Func`` module, where transformers' hub decorators
    made it one), or None."""
    if attention_cls in _STOCK_ROTARY:
        return _STOCK_ROTARY[attention_cls]
    _STOCK_ROTARY[attention_cls] = found = _find_stock_rotary(attention_cls)
    return found


def _find_stock_rotary(attention_cls: Any) -> Callable[..., Any] | None:
    site = _rotary_site(attention_cls.forward)
    if site is None:
        return None
    g = site.__globals__[ROTARY_NAME]
    if isinstance(g, types.FunctionType):
        return g
    # kernels' _create_func_module(func).Func: the function is in its forward's closure.
    for _, inner in _closure_functions(_function(type(g).forward) or (lambda: None)):  # type: ignore[arg-type]
        if inner.__name__ == ROTARY_NAME:
            return inner
    wrapped = getattr(g, "__wrapped__", None)
    return wrapped if isinstance(wrapped, types.FunctionType) else None


# ---------------------------------------------------------------- probes


def _gate_kind(act: Any) -> str | None:
    """ "silu" or "gelu_tanh" when `act` computes exactly that (probed, not named), else None."""
    probe = torch.linspace(-8, 8, 257, dtype=torch.float64)
    try:
        with torch.no_grad():
            got = act(probe)
    except Exception:
        return None
    if not isinstance(got, torch.Tensor) or got.shape != probe.shape:
        return None
    if torch.equal(got, F.silu(probe)):
        return "silu"
    if torch.equal(got, F.gelu(probe, approximate="tanh")):
        return "gelu_tanh"
    return None


def _same(got: Any, want: Any) -> tuple[bool, int]:
    """(close enough, how many elements differ bitwise): fp32 to 1e-5
    relative, 16-bit within its roundings, the dtype always equal; the
    count picks the casting mode that rounds where the module does."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return False, 0
    if got.dtype != want.dtype or got.shape != want.shape:
        return False, 0
    g, w = got.double(), want.double()
    differ = int((got != want).sum())
    if want.dtype in (torch.float32, torch.float64):
        ok = bool(((g - w).abs() <= 1e-5 * w.abs().max() + 1e-7).all())
    else:
        # within two roundings of the 16-bit type (stock code rounds after
        # each product, tierkit's kernels once): a mode or layout that is
        # wrong is off by far more, a dtype that is wrong fails above.
        ok = bool(((g - w).abs() <= 1.6e-2 * w.abs() + 4e-3 * w.abs().max()).all())
    return ok, differ


_EPS_ATTRS = ("variance_epsilon", "eps", "epsilon", "variance_eps", "norm_eps")
_NORM_MODES = (("llama", 0.0), ("gemma", 1.0), ("aten", 0.0), ("llama", 1.0), ("aten", 1.0), ("gemma", 0.0))


def _probe_copy(module: Any, d: int, gen: torch.Generator, params: tuple[str, ...]) -> Any:
    """A float32 copy of `module` whose parameters `params` ([d] each) hold
    bfloat16 values, so the probe's conversions between dtypes are exact; or
    why it cannot be copied."""
    try:
        probe = copy.deepcopy(module).float()
    except Exception as e:
        return f"cannot be copied to probe ({type(e).__name__})"
    with torch.no_grad():
        for name in params:
            getattr(probe, name).copy_((torch.randn(d, generator=gen) * 0.5).bfloat16().float())
    return probe


def _norm_probe(module: Any) -> tuple[str, float, str] | str:
    """(casting mode, offset, eps attribute) when tierkit's rms_norm gives the
    module's own output on probes (random weight, fp32, bfloat16, float32
    weight with bfloat16 input; a small scale where eps matters), else why not."""
    from . import ops

    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return "no 1-d weight"
    if getattr(module, "bias", None) is not None:
        return "has a bias"
    eps_attrs = [a for a in _EPS_ATTRS if isinstance(getattr(module, a, None), float)]
    if not eps_attrs:
        return "no float eps attribute"
    why = _one_input(type(module).forward)
    if why:
        return why
    d = weight.numel()
    gen = torch.Generator().manual_seed(0)
    probe = _probe_copy(module, d, gen, ("weight",))
    if isinstance(probe, str):
        return probe
    x = torch.randn(3, 7, d, generator=gen)
    cases = []  # (weight dtype, x)
    for scale in (1.0, 1e-3):
        cases += [
            (torch.float32, x * scale),
            (torch.bfloat16, (x * scale).bfloat16()),
            (torch.float32, (x * scale).bfloat16()),
        ]
    stock = type(module).forward
    wants = []
    try:
        with torch.no_grad():
            for wdtype, xs in cases:
                p = probe.to(wdtype)
                wants.append(stock(p, xs))
    except Exception as e:
        return f"its forward fails on a probe ({type(e).__name__})"
    best: tuple[int, tuple[str, float, str]] | None = None
    for eps_attr in eps_attrs:
        for mode, offset in _NORM_MODES:
            total, ok = 0, True
            with torch.no_grad():
                for (wdtype, xs), want in zip(cases, wants):
                    p = probe.to(wdtype)
                    got = ops.rms_norm(xs, p.weight, getattr(p, eps_attr), offset=offset, casting_mode=mode)
                    same, differ = _same(got, want)
                    ok, total = ok and same, total + differ
                    if not ok:
                        break
            if ok and (best is None or total < best[0]):
                best = (total, (mode, offset, eps_attr))
    return best[1] if best else "no casting mode, offset and eps of rms_norm gives its output"


def _one_input(forward: Any) -> str | None:
    """None when `forward` (a class's) takes the input alone, as tierkit's
    replacements do; else why not: a caller passing more (a gated norm's
    ``gate``, ``**kwargs``) would get another result or a TypeError."""
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return "its forward's signature cannot be read"
    if len(params) != 1 or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return "its forward takes more than the input (" + ", ".join(p.name for p in params) + ")"
    return None


def _layer_norm_probe(module: Any) -> bool:
    """Whether `module` is a torch.nn.LayerNorm tierkit's layer_norm computes exactly (below)."""
    return isinstance(module, torch.nn.LayerNorm) and _layer_norm_why(module) is None


def _layer_norm_why(module: Any) -> str | None:
    """None when tierkit's layer_norm gives the module's own output (random
    weight and bias, fp32 and bfloat16: a subclass that changes the forward,
    Nemotron's weight + 1, fails), else why not."""
    from . import ops

    if len(module.normalized_shape) != 1 or not module.elementwise_affine or module.bias is None:
        return f"normalized_shape {tuple(module.normalized_shape)}, no affine weight and bias"
    why = _one_input(type(module).forward)
    if why:
        return why
    d = module.normalized_shape[0]
    gen = torch.Generator().manual_seed(0)
    probe = _probe_copy(module, d, gen, ("weight", "bias"))
    if isinstance(probe, str):
        return probe
    x = torch.randn(3, 7, d, generator=gen) * 2 + 0.5
    try:
        with torch.no_grad():
            for dtype in (torch.float32, torch.bfloat16):
                p = probe.to(dtype)
                want = type(module).forward(p, x.to(dtype))
                got = ops.layer_norm(x.to(dtype), p.weight, p.bias, p.eps)
                if not _same(got, want)[0]:
                    return f"tierkit's layer_norm gives another output ({dtype})"
    except Exception as e:
        return f"its forward fails on a probe ({type(e).__name__})"
    return None


_ACT_ATTRS = ("act_fn", "activation_fn", "act", "activation")


def _mlp_probe(module: Any) -> tuple[str, bool, str] | str:
    """(gate, fused, activation attribute) when tierkit's fused gate gives the module's output, else why not."""
    fused = hasattr(module, "gate_up_proj") and hasattr(module, "down_proj")
    split = all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj"))
    if not (fused or split):
        return "not gate/up/down projections"
    act_attr = next((a for a in _ACT_ATTRS if callable(getattr(module, a, None))), None)
    if act_attr is None:
        return "no activation attribute"
    gate = _gate_kind(getattr(module, act_attr))
    if gate is None:
        return f"activation {type(getattr(module, act_attr)).__name__}: no fused gate"
    why = _one_input(type(module).forward)
    if why:
        return why
    forward = _mlp_forward(gate, fused, act_attr)
    proj = module.gate_up_proj if fused else module.gate_proj
    w = getattr(proj, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        return "projections without a 2-d weight"
    x = torch.randn(1, 3, w.shape[1], generator=torch.Generator().manual_seed(1)).to(w.dtype).to(w.device)
    try:
        with torch.no_grad():
            want = type(module).forward(module, x)
            got = forward(module, x)
    except Exception as e:
        return f"its forward fails on a probe ({type(e).__name__})"
    return (gate, fused, act_attr) if _same(got, want)[0] else "tierkit's fused gate gives another output"


def _rotary_probe(module: Any) -> str | None:
    """None when tierkit's apply_rotary_pos_emb gives the attention's own
    function's outputs (values and dtypes: fp32, bfloat16, bfloat16 q and k
    with float32 tables; the model's rotary width), else why not."""
    stock = stock_rotary(type(module))
    if stock is None:
        return "calls no apply_rotary_pos_emb"
    head_dim = getattr(module, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim % 2:
        return "no even head_dim"
    widths = {head_dim}
    config = getattr(module, "config", None)
    factor = getattr(config, "partial_rotary_factor", None)
    rope = getattr(config, "rope_parameters", None)
    if factor is None and isinstance(rope, dict):
        factor = rope.get("partial_rotary_factor")
    if isinstance(factor, float) and factor < 1.0:
        widths = {int(head_dim * factor) // 2 * 2}
    gen = torch.Generator().manual_seed(2)
    for width in widths:
        q = torch.randn(2, 3, 5, head_dim, generator=gen)
        k = torch.randn(2, 1, 5, head_dim, generator=gen)
        angles = torch.rand(2, 5, width // 2, generator=gen) * 6.0
        emb = torch.cat([angles, angles], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        for qd, td in (
            (torch.float32, torch.float32),
            (torch.bfloat16, torch.bfloat16),
            (torch.bfloat16, torch.float32),
        ):
            args = (q.to(qd), k.to(qd), cos.to(td), sin.to(td))
            try:
                with torch.no_grad():
                    want = stock(*args)
            except Exception as e:
                return f"its apply_rotary_pos_emb takes other arguments ({type(e).__name__})"
            with torch.no_grad():
                got = apply_rotary_pos_emb(*args)
            if not (isinstance(want, tuple) and len(want) == 2):
                return "its apply_rotary_pos_emb returns something else"
            for g, w in zip(got, want):
                if not isinstance(w, torch.Tensor) or g.dtype != w.dtype:
                    return f"its apply_rotary_pos_emb returns {getattr(w, 'dtype', None)} for {qd} q, {td} tables"
                if not _same(g, w)[0]:
                    return f"its apply_rotary_pos_emb computes another rotation ({qd} q, {td} tables)"
    return None


# ---------------------------------------------------------------- under torch.compile

# Per kind of replacement ("norm", "layer_norm", "mlp", "rotary"): who computes it
# inside a torch.compile'd model. "tierkit": the patched forward (tierkit's op,
# opaque to Inductor); "inductor": the module's stock forward, which Inductor
# traces and fuses with the code around it (the op's decomposition while
# compiling: the formula the probe checked the op against); a number N (the
# kinds whose forward takes one tensor): Inductor for a call of at most N rows
# (tokens: the input's elements over its last dim), tierkit's op above or where
# the size is dynamic, decided while dynamo traces. Eager calls always take
# tierkit's op. Chosen from the measurements in docs/models.md ("Under
# torch.compile"); read when a module is patched (or unpickled); a kind not
# here is "tierkit".
COMPILED: dict[str, str | int] = {"norm": "inductor", "rotary": "inductor", "mlp": 64}

# The kinds whose patched forward takes one tensor, so a row count can choose.
_ONE_TENSOR = ("norm", "layer_norm", "mlp")


def compiled_choice(kind: str) -> str | int:
    """Who computes a patched `kind` inside a torch.compile'd model (COMPILED):
    "tierkit", "inductor", or the most rows a call may have for Inductor to take it."""
    choice = COMPILED.get(kind, "tierkit")
    if choice in ("tierkit", "inductor"):
        return choice
    if type(choice) is int and choice > 0 and kind in _ONE_TENSOR:
        return choice
    rows = " or a row count above 0" if kind in _ONE_TENSOR else ""
    raise ValueError(
        f'tierkit_torch.models.COMPILED[{kind!r}]: expected "tierkit" or "inductor"{rows}, got {choice!r}'
    )


# The norms' and MLPs' forwards take one tensor; an attention's, whatever its class's
# does (a star-args forward costs a guard on the keyword dict at each call site).
_COMPILED_SOURCE = {
    "one": """\
def forward(self, x):
    if torch.compiler.is_compiling():
        return STOCK(self, x)
    return TIERKIT(self, x)
""",
    "any": """\
def forward(self, *args, **kwargs):
    if torch.compiler.is_compiling():
        return STOCK(self, *args, **kwargs)
    return TIERKIT(self, *args, **kwargs)
""",
    # ROWS, a literal. KNOWN is statically_known_true: for a static shape the comparison of
    # ints, which leaves no trace in the graph; for a dynamic one true only where no value of
    # the dim could make it false, so it takes tierkit's op and puts no guard on the dim (a
    # plain comparison narrowed its range: torch.export with a dynamic batch refused it).
    "rows": """\
def forward(self, x):
    if torch.compiler.is_compiling() and KNOWN(x.numel() <= ROWS * x.shape[-1]):
        return STOCK(self, x)
    return TIERKIT(self, x)
""",
}


def _compiled_as_chosen(kind: str, func: Callable[..., Any], stock: Callable[..., Any]) -> Callable[..., Any]:
    """`func`, or, where COMPILED gives `kind` to Inductor, a forward that runs
    the module's stock forward while dynamo traces it (for calls of at most
    COMPILED's rows, where it gives a number; torch.compiler.is_compiling() is
    a constant there: no graph break) and `func` otherwise."""
    choice = compiled_choice(kind)
    if choice == "tierkit":
        return func
    key = ("compiled", kind, func, stock, choice)
    if choice == "inductor":
        source = _COMPILED_SOURCE["any" if kind == "rotary" else "one"]
    else:
        source = _COMPILED_SOURCE["rows"].replace("ROWS", str(int(choice)))
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    scope = {"torch": torch, "STOCK": stock, "TIERKIT": func, "KNOWN": statically_known_true}
    forward = _shared(key, source, scope)
    forward.__wrapped__ = func  # what runs eagerly (_rotary_site looks through it)
    return forward


def _forward_from_spec(module: torch.nn.Module, spec: tuple) -> Callable[..., Any] | None:
    kind = spec[0]
    func = _tierkit_forward(module, spec)
    if func is None or kind not in ("norm", "layer_norm", "mlp", "rotary"):
        return func
    return _compiled_as_chosen(kind, func, type(module).forward)


def _tierkit_forward(module: torch.nn.Module, spec: tuple) -> Callable[..., Any] | None:
    kind = spec[0]
    if kind == "norm":
        return _norm_forward(*spec[1:])
    if kind == "layer_norm":
        return _layer_norm_forward()
    if kind == "mlp":
        return _mlp_forward(*spec[1:])
    if kind == "rotary":  # one copy per class forward, shared by its instances
        stock = type(module).forward
        return _once(("rotary", stock), lambda: _with_rotary(stock, apply_rotary_pos_emb))
    if kind == "method":  # a forward kernels put in (an importable layer's)
        return spec[1]
    if kind == "hub":  # tierkit_torch.hub's per-instance forwards
        from . import hub

        return hub._forward_from_spec(module, spec)
    return None


# ---------------------------------------------------------------- per-instance state that survives pickling


def bind(module: torch.nn.Module, spec: tuple) -> bool:
    """Give `module` the forward `spec` describes, as its own, and the
    per-instance ``__reduce_ex__`` that keeps it through pickle and copy."""
    func = _forward_from_spec(module, spec)
    if func is None:
        return False
    if spec[0] != "method":
        func._tierkit_spec = spec  # type: ignore[attr-defined]
    module.__dict__["forward"] = types.MethodType(func, module)
    keep_through_copies(module)
    return True


def keep_through_copies(module: torch.nn.Module) -> None:
    """Install the per-instance ``__reduce_ex__`` (pickle, copy.copy and
    copy.deepcopy find it on the instance; the class is not touched)."""
    module.__dict__["__reduce_ex__"] = _Reduce(module)


def _spec_of(module: torch.nn.Module) -> tuple | None:
    """What the module's own forward is, as a spec, when it is one this
    package can rebuild: tierkit's, or an importable layer's kernels bound."""
    f = module.__dict__.get("forward")
    if not isinstance(f, types.MethodType) or f.__self__ is not module:
        return None
    spec = getattr(f.__func__, "_tierkit_spec", None)
    if spec is not None:
        return spec
    mod = getattr(f.__func__, "__module__", "") or ""
    if mod.startswith("tierkit_torch.") and "<locals>" not in f.__func__.__qualname__:
        return ("method", f.__func__)
    return None


class _Reduce:
    """A module's own ``__reduce_ex__``: the default reduction, less its bound
    forward, rebuilt from a spec after the state is set."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def __call__(self, protocol: int) -> tuple:
        m = self.module
        rv = object.__reduce_ex__(m, max(protocol, 2))
        state = dict(rv[2]) if isinstance(rv[2], dict) else dict(m.__dict__)
        state.pop("__reduce_ex__", None)
        spec = _spec_of(m)
        if spec is not None:
            state.pop("forward", None)
        return (_restore, (type(m), spec), state)


def _restore(cls: Any, spec: tuple | None) -> torch.nn.Module:
    module = cls.__new__(cls)
    module.__dict__["__setstate__"] = _SetState(module, spec)
    return module


class _SetState:
    def __init__(self, module: torch.nn.Module, spec: tuple | None) -> None:
        self.module, self.spec = module, spec

    def __call__(self, state: dict) -> None:
        m = self.module
        m.__dict__.pop("__setstate__", None)
        setstate = getattr(type(m), "__setstate__", None)
        if setstate is not None:
            setstate(m, state)
        else:
            m.__dict__.update(state)
        if self.spec is not None:
            bind(m, self.spec)
        else:
            keep_through_copies(m)


def patched_kind(module: torch.nn.Module) -> str | None:
    """What tierkit replaced in this module ("norm", "mlp", "rotary"), read
    from its forward (not from a flag), or None when it runs its stock one."""
    spec = _spec_of(module)
    if spec is None or spec[0] == "method":
        return None
    return {"norm": "norm", "layer_norm": "norm", "mlp": "mlp", "rotary": "rotary"}.get(spec[0])


def patched_modules(model: torch.nn.Module) -> dict[str, str]:
    """Module name -> what tierkit replaced there, for every module of `model`
    that runs a tierkit forward now (by patch, or by kernels with tierkit's layers)."""
    out = {}
    for name, module in model.named_modules():
        kind = patched_kind(module)
        if kind is None:
            spec = _spec_of(module)
            if spec is not None and spec[0] == "method":
                kind = "kernels: " + spec[1].__qualname__.split(".")[0]
        if kind is None:
            for func in (module.__dict__.get("_kernel_funcs") or {}).values():
                f = getattr(func, "forward", None)
                if (getattr(f, "__module__", "") or "") == "tierkit_torch.hub.layers":
                    owner = getattr(f, "__self__", None)
                    kind = "kernels: " + type(owner).__name__ if owner is not None else "kernels"
        if kind is not None:
            out[name] = kind
    return out


# ---------------------------------------------------------------- patch


def _looks_like_norm(module: torch.nn.Module) -> bool:
    name = type(module).__name__.lower()
    return "norm" in name and isinstance(getattr(module, "weight", None), torch.Tensor)


def patch(model: torch.nn.Module) -> dict[str, int]:
    """Put tierkit's operators into a loaded transformers model, in place.

    Every module whose probe shows tierkit's op gives its own result is
    replaced, per instance: RMSNorms (``rms_norm`` with the casting mode,
    offset and eps attribute the probe found), ``torch.nn.LayerNorm``
    (``layer_norm``), gated MLPs (``silu_mul`` / ``gelu_tanh_mul``) and the
    attentions' ``apply_rotary_pos_emb`` (``rotary_embedding``). Returns how
    many modules run tierkit's forward of each kind (``{"norm": n, "mlp": n,
    "rotary": n}``); the norms, MLPs and attentions left alone are named in
    a ``UserWarning`` with the reason. Patching twice is the same as once; a
    module whose patch was lost (a copy made without it) is patched again.

    A PEFT model is patched through its base model; a ``torch.compile``'d
    module is refused (patch ``model._orig_mod``, then compile again)."""
    model = unwrap_model(model, "tierkit_torch.patch")
    counts = {"norm": 0, "mlp": 0, "rotary": 0}
    skipped: dict[str, str] = {}
    probed: dict[tuple[Any, ...], Any] = {}  # per class and shape: the probe's answer, once
    for module in model.modules():
        cls = type(module)
        done = patched_kind(module)
        if done:
            counts[done] += 1
            continue
        name = cls.__name__
        if isinstance(module, torch.nn.LayerNorm):
            ln_key = (
                cls,
                "layer_norm",
                tuple(module.normalized_shape),
                module.elementwise_affine,
                module.bias is None,
            )
            if ln_key not in probed:
                probed[ln_key] = _layer_norm_why(module)
            why = probed[ln_key]
            if why is None:
                bind(module, ("layer_norm",))
                counts["norm"] += 1
            else:
                skipped[name] = why
            continue
        if _looks_like_norm(module):
            w: Any = module.weight
            key: tuple[Any, ...] = (cls, "norm", w.numel(), w.dtype)
            if key not in probed:
                probed[key] = _norm_probe(module)
            found = probed[key]
            if isinstance(found, tuple):
                bind(module, ("norm", *found))
                counts["norm"] += 1
            else:
                skipped[name] = found
            continue
        if (
            name.endswith("MLP")
            or hasattr(module, "gate_up_proj")
            or (hasattr(module, "gate_proj") and hasattr(module, "down_proj"))
        ):
            found = _mlp_probe(module)
            if isinstance(found, tuple):
                bind(module, ("mlp", *found))
                counts["mlp"] += 1
            else:
                skipped[name] = found
            continue
        if _rotary_site(cls.forward) is not None:
            key = (cls, "rotary", getattr(module, "head_dim", None))
            if key not in probed:
                probed[key] = _rotary_probe(module)
            why = probed[key]
            if why is None and bind(module, ("rotary",)):
                counts["rotary"] += 1
            else:
                skipped[name] = why or "its forward could not be rebuilt"
    warn_skipped("tierkit_torch.patch", skipped)
    return counts
