"""tierkit's layers through Hugging Face ``kernels`` (0.17.x), served offline
from a local repository inside this package (docs/models.md):

    from kernels import Mode, kernelize, use_kernel_mapping
    import tierkit_torch.hub as hub

    hub.mark(model)                       # which modules kernelize may replace
    with use_kernel_mapping(hub.mapping()):
        kernelize(model, device="cpu", mode=Mode.INFERENCE)

``mark`` is needed because transformers 5.23 turns its own hub decorators
(``@use_kernel_forward_from_hub("RMSNorm")``, ``@use_kernelized_func``) into
no-ops unless kernels >= 0.18.2 is installed; it marks the modules of one
model (a condition per instance: other models are not affected) the way the
decorators would. The hub names: ``"RMSNorm"`` (transformers' own),
``"GemmaRMSNorm"`` and ``"LayerNorm"`` (tierkit's: transformers names
neither), ``"rotary_pos_emb"`` (transformers'). kernels is imported only
when these functions are called.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch

from ..models import _family_of, _rotary_global, _with_rotary

__all__ = ["kernelize", "mapping", "mark", "repo_path"]

_MARK = "_tierkit_hub"


def repo_path() -> Path:
    """The local kernels repository (``torch-universal/``) holding tierkit's layers."""
    return Path(__file__).resolve().parent / "repo"


def mapping(devices: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The kernel mapping for ``kernels.use_kernel_mapping`` / ``register_kernel_mapping``:
    each hub name to tierkit's layer, for the CPU and, where tierkit-cuda is
    installed, CUDA; in inference, training and ``torch.compile`` modes."""
    import importlib.util

    from kernels import LocalLayerRepository, Mode

    if devices is None:
        devices = ("cpu", "cuda") if importlib.util.find_spec("tierkit_cuda") else ("cpu",)
    layers = {
        "RMSNorm": "RMSNorm",
        "GemmaRMSNorm": "GemmaRMSNorm",
        "LayerNorm": "LayerNorm",
        "rotary_pos_emb": "RotaryPosEmb",
    }
    out: dict[str, Any] = {}
    for name, layer in layers.items():
        repo = LocalLayerRepository(repo_path=repo_path(), layer_name=layer)
        modes = {Mode.INFERENCE | Mode.TORCH_COMPILE: repo, Mode.TRAINING | Mode.TORCH_COMPILE: repo}
        out[name] = {device: modes for device in devices}
    return out


def _marked(module: Any) -> bool:
    return bool(getattr(module, _MARK, False))


def mark(model: torch.nn.Module) -> dict[str, int]:
    """Mark the modules of `model` that ``kernels.kernelize`` may give
    tierkit's layers, as transformers' hub decorators would: its norms (under
    the hub names above) and its attentions' rotary function. Returns the
    counts per kind, as ``tierkit_torch.patch``."""
    from kernels import replace_kernel_forward_from_hub, use_kernel_forward_from_hub

    family = _family_of(model, "tierkit_torch.hub.mark")
    counts = {"norm": 0, "rotary": 0}
    p = family.prefix
    norm_name = "GemmaRMSNorm" if family.casting_mode == "gemma" else "RMSNorm"
    for module in model.modules():
        cls = type(module)
        is_norm = cls.__name__ == f"{p}RMSNorm" or (family.layer_norm and cls is torch.nn.LayerNorm)
        if is_norm:
            hub_name = "LayerNorm" if family.layer_norm else norm_name
            if (
                getattr(cls, "kernel_layer_name", None) != hub_name
                or getattr(cls, "kernel_condition", None) is not _marked
            ):
                replace_kernel_forward_from_hub(cls, hub_name, condition=_marked)
            setattr(module, _MARK, True)
            counts["norm"] += 1
        elif cls.__name__.startswith(p) and cls.__name__.endswith("Attention"):
            funcs = module.__dict__.setdefault("_kernel_funcs", {})
            if "rotary_pos_emb" not in funcs:
                stock = _rotary_global(cls.forward)
                if stock is None:
                    continue
                # A hub function of this model's own (kernels replaces its forward), read by this instance only.
                func = use_kernel_forward_from_hub("rotary_pos_emb")(stock)
                module.forward = types.MethodType(_with_rotary(cls.forward, func), module)
                funcs["rotary_pos_emb"] = func
            counts["rotary"] += 1
    return counts


def kernelize(model: torch.nn.Module, mode: Any = None, device: str = "cpu") -> torch.nn.Module:
    """``mark(model)``, then ``kernels.kernelize`` with tierkit's mapping (default mode: inference)."""
    import kernels

    mark(model)
    with kernels.use_kernel_mapping(mapping()):
        return kernels.kernelize(
            model, device=device, mode=mode if mode is not None else kernels.Mode.INFERENCE
        )
