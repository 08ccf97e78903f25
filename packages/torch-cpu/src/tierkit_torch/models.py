"""tierkit inside a loaded Hugging Face transformers model, in one call:
``tierkit_torch.patch(model)`` (docs/models.md).

It replaces the ``forward`` of each module it knows, on that instance only:
parameters, buffers, ``state_dict`` keys and values, ``save_pretrained`` and
other models in the process stay as they were. What it knows is the table
below (``FAMILIES``): per family, its norm classes (casting mode, offset,
the attribute holding eps), its gated-MLP classes and its attention classes,
whose ``apply_rotary_pos_emb`` becomes ``tierkit_torch.rotary_embedding``.

transformers is never imported here (the model's classes are matched by
name), so ``import tierkit_torch`` does not import it; it is the
``tierkit-torch[transformers]`` extra.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["FAMILIES", "Family", "patch"]


@dataclass(frozen=True)
class Family:
    """One transformers family: class names (prefix + suffix) and how its norm rounds."""

    prefix: str  # "Llama": LlamaRMSNorm, LlamaMLP, LlamaAttention
    casting_mode: str = "llama"
    offset: float = 0.0
    eps_attr: str = "variance_epsilon"
    fused_gate_up: bool = False  # Phi-3: gate_up_proj, chunked
    layer_norm: bool = False  # GPT-2: torch.nn.LayerNorm, no gated MLP, no rotary


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


def _family_of(model: torch.nn.Module, who: str) -> Family:
    """The longest prefix of the model's class name (Gemma3ForCausalLM: Gemma3,
    not Gemma), or the error `who` raises for a model of no known family."""
    name = type(model).__name__
    known = [f for f in FAMILIES if name.startswith(f.prefix)]
    if not known:
        names = ", ".join(f.prefix for f in FAMILIES)
        raise ValueError(
            f"{who}: model: expected a transformers model of a known family ({names}), got {name}"
        )
    return max(known, key=lambda f: len(f.prefix))


def _gate_kind(act: Any) -> str | None:
    """ "silu" or "gelu_tanh" when `act` computes exactly that (probed, not named), else None."""
    probe = torch.linspace(-8, 8, 257, dtype=torch.float64)
    with torch.no_grad():
        got = act(probe)
    if torch.equal(got, F.silu(probe)):
        return "silu"
    if torch.equal(got, F.gelu(probe, approximate="tanh")):
        return "gelu_tanh"
    return None


def _norm_forward(mode: str, offset: float, eps_attr: str) -> Callable[..., Any]:
    from . import ops

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(
            hidden_states, self.weight, getattr(self, eps_attr), offset=offset, casting_mode=mode
        )

    return forward


def _layer_norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    from . import ops

    return ops.layer_norm(x, self.weight, self.bias, self.eps)


def _mlp_forward(gate: str, fused: bool) -> Callable[..., Any]:
    from . import ops

    op = ops.silu_mul if gate == "silu" else ops.gelu_tanh_mul

    def fused_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        g, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        return self.down_proj(op(g, up))

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(op(self.gate_proj(x), self.up_proj(x)))

    return fused_forward if fused else forward


def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> tuple[Any, Any]:
    """transformers' apply_rotary_pos_emb (partial width too: Phi-3's), on tierkit's op."""
    from . import ops

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return ops.rotary_embedding(q, cos, sin), ops.rotary_embedding(k, cos, sin)


def _rotary_global(forward: Any) -> Any | None:
    """The ``apply_rotary_pos_emb`` an attention's forward calls (its module's), or None if it calls none."""
    fn = getattr(forward, "__func__", forward)
    if not isinstance(fn, types.FunctionType) or "apply_rotary_pos_emb" not in fn.__code__.co_names:
        return None
    return fn.__globals__.get("apply_rotary_pos_emb")


def _with_rotary(forward: Any, replacement: Any) -> Any:
    """The attention's forward function reading `replacement` as its
    ``apply_rotary_pos_emb``: the same code over a copy of its module's
    globals with that one name replaced (transformers calls a module-level
    function), so only the instances given it see the change."""
    fn = getattr(forward, "__func__", forward)
    scope = dict(fn.__globals__)
    scope["apply_rotary_pos_emb"] = replacement
    new = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    return new


def patch(model: torch.nn.Module) -> dict[str, int]:
    """Put tierkit's operators into a loaded transformers model, in place.

    Replaces, per module instance: every RMSNorm of a known family by
    ``rms_norm`` with that family's casting mode, offset and eps attribute
    (GPT-2's LayerNorms by ``layer_norm``); every gated MLP (SiLU or
    GELU-tanh gate, checked by value) by ``silu_mul`` / ``gelu_tanh_mul``;
    every attention's rotary application by ``rotary_embedding``. Returns
    how many it replaced of each kind (``{"norm": n, "mlp": n, "rotary":
    n}``); modules it does not know are left alone and named in a warning.
    Patching twice is the same as once."""
    family = _family_of(model, "tierkit_torch.patch")
    counts = {"norm": 0, "mlp": 0, "rotary": 0}
    skipped: set[str] = set()
    p = family.prefix
    for module in model.modules():
        cls = type(module).__name__
        done = module.__dict__.get("_tierkit_patched")
        if done:
            counts[done] += 1
            continue
        kind = None
        if family.layer_norm and isinstance(module, torch.nn.LayerNorm):
            if len(module.normalized_shape) == 1 and module.elementwise_affine:
                module.forward = types.MethodType(  # type: ignore[method-assign]
                    _layer_norm_forward, module
                )
                kind = "norm"
            else:
                skipped.add(f"{cls} (normalized_shape {tuple(module.normalized_shape)})")
        elif cls == f"{p}RMSNorm":
            module.forward = types.MethodType(
                _norm_forward(family.casting_mode, family.offset, family.eps_attr), module
            )
            kind = "norm"
        elif cls == f"{p}MLP":
            act = getattr(module, "act_fn", None) or getattr(module, "activation_fn", None)
            gate = _gate_kind(act) if act is not None else None
            if gate is None:
                skipped.add(f"{cls} (activation {type(act).__name__}: no fused gate)")
            else:
                module.forward = types.MethodType(_mlp_forward(gate, family.fused_gate_up), module)
                kind = "mlp"
        elif cls.endswith("Attention") and cls.startswith(p):
            if _rotary_global(type(module).forward) is None:
                skipped.add(f"{cls} (no apply_rotary_pos_emb)")
            else:
                module.forward = types.MethodType(
                    _with_rotary(type(module).forward, apply_rotary_pos_emb), module
                )
                kind = "rotary"
        elif "Norm" in cls or cls.endswith("MLP"):
            skipped.add(cls)
        if kind:
            module.__dict__["_tierkit_patched"] = kind
            counts[kind] += 1
    if skipped:
        warnings.warn(
            f"tierkit_torch.patch: left as they were (not known to tierkit): {', '.join(sorted(skipped))}",
            stacklevel=2,
        )
    return counts
