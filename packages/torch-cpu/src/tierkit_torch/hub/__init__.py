"""tierkit's layers through Hugging Face ``kernels`` (the versions transformers
accepts: 0.18.x with transformers 5.23/5.24, 0.19.x with 5.25), served
offline from a local repository inside this package (docs/models.md):

    from kernels import Mode, kernelize, use_kernel_mapping
    import tierkit_torch.hub as hub

    hub.mark(model)                       # this model's modules transformers did not name
    with use_kernel_mapping(hub.mapping()):
        kernelize(model, device="cpu", mode=Mode.INFERENCE)

transformers names its Llama-family norms ``"RMSNorm"`` and its rotary
function ``"rotary_pos_emb"`` (hub decorators, on when its kernels range is
installed); ``mapping()`` maps those names to tierkit's layers. ``mark``
touches no class: it gives this model's instances what transformers did not
(Gemma's norms, GPT-2's LayerNorms, an attention whose rotary function is
not a hub function) a per-instance kernels function of their own (in
``module._kernel_funcs``, which ``kernelize`` replaces), after probing that
tierkit's layer computes what the module does; and it makes the forwards
``kernelize`` binds survive ``pickle``/``torch.save`` and copies. kernels is
imported only when these functions are called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .. import models as _models
from . import layers

__all__ = ["kernelize", "layers", "mapping", "mark", "repo_path"]

_MARK = "_tierkit_hub"
_NORM_FUNC = "tierkit_norm"


def repo_path() -> Path:
    """The local kernels repository: ``build/torch-cpu`` and ``build/torch-cuda``
    (the noarch variants kernels 0.18 and 0.19 pick by torch's backend)."""
    return Path(__file__).resolve().parent / "repo"


def mapping(devices: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The kernel mapping for ``kernels.use_kernel_mapping`` / ``register_kernel_mapping``:
    each hub name to tierkit's layer, for the CPU and, where tierkit-cuda is
    installed, CUDA; in inference, training and ``torch.compile`` modes."""
    import importlib.util

    from kernels import LocalLayerRepository, Mode

    if devices is None:
        devices = ("cpu", "cuda") if importlib.util.find_spec("tierkit_cuda") else ("cpu",)
    names = {
        "RMSNorm": "RMSNorm",
        "GemmaRMSNorm": "GemmaRMSNorm",
        "LayerNorm": "LayerNorm",
        "rotary_pos_emb": "RotaryPosEmb",
    }
    out: dict[str, Any] = {}
    for name, layer in names.items():
        repo = LocalLayerRepository(repo_path=repo_path(), layer_name=layer)
        modes = {Mode.INFERENCE | Mode.TORCH_COMPILE: repo, Mode.TRAINING | Mode.TORCH_COMPILE: repo}
        out[name] = {device: modes for device in devices}
    return out


# ---------------------------------------------------------------- per-instance kernels functions


class _NormFunc(torch.nn.Module):
    _target: Any  # in __dict__, not a submodule
    """A norm instance's own kernels function (kernelize replaces its
    forward with a layer reading ``self.weight`` and the eps: here, the norm's)."""

    kernel_layer_name = "RMSNorm"
    has_backward = True
    can_torch_compile = True

    def __init__(self, target: torch.nn.Module) -> None:
        super().__init__()
        self.__dict__["_target"] = target  # not a submodule: the norm is in the model already

    @property
    def weight(self) -> Any:
        return self._target.weight

    @property
    def bias(self) -> Any:
        return self._target.bias

    @property
    def eps(self) -> Any:
        return self._target.eps

    @property
    def variance_epsilon(self) -> Any:
        return self._target.variance_epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return type(self._target).forward(self._target, x)


class _GemmaNormFunc(_NormFunc):
    kernel_layer_name = "GemmaRMSNorm"


class _LayerNormFunc(_NormFunc):
    kernel_layer_name = "LayerNorm"


class _RotaryFunc(torch.nn.Module):
    """An attention instance's own ``rotary_pos_emb`` kernels function."""

    _cls: Any

    kernel_layer_name = "rotary_pos_emb"
    has_backward = True
    can_torch_compile = True

    def __init__(self, attention_cls: type) -> None:
        super().__init__()
        self.__dict__["_cls"] = attention_cls  # pickled by name (the function may be shadowed by a hub one)

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        return _models.stock_rotary(self._cls)(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def _norm_via_func(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    return self._kernel_funcs[_NORM_FUNC](hidden_states)


def _forward_from_spec(module: torch.nn.Module, spec: tuple) -> Any:
    if spec[1] == "norm":
        return _norm_via_func
    if spec[1] == "rotary":
        return _models._with_rotary(type(module).forward, module.__dict__["_kernel_funcs"][ROTARY_FUNC])
    return None


_NORM_FUNCS = {("gemma", 1.0, "eps"): _GemmaNormFunc, ("llama", 0.0, "variance_epsilon"): _NormFunc}


def _hub_name(cls: type) -> str | None:
    return getattr(cls, "kernel_layer_name", None)


def mark(model: torch.nn.Module) -> dict[str, int]:
    """Make `model` ready for ``kernels.kernelize`` with ``mapping()``: its
    norms and rotary functions that tierkit's layers compute (probed as
    ``tierkit_torch.patch`` does) and that transformers gave no hub name get
    per-instance kernels functions; modules already named by transformers are
    counted after the same probe, and the ones a tierkit layer would get wrong
    are kept from it (named in a warning). No class is changed. Returns the
    counts per kind, as ``tierkit_torch.patch``."""
    model = _models.unwrap_model(model, "tierkit_torch.hub.mark")
    counts = {"norm": 0, "rotary": 0}
    skipped: dict[str, str] = {}
    probed: dict[tuple[Any, ...], Any] = {}
    for module in model.modules():
        cls = type(module)
        name = cls.__name__
        is_norm = isinstance(module, torch.nn.LayerNorm) or _models._looks_like_norm(module)
        if module.__dict__.get(_MARK):  # marked already (pickles and copies keep it)
            counts["norm" if is_norm else "rotary"] += 1
            continue
        if is_norm:
            if isinstance(module, torch.nn.LayerNorm):
                found: Any = (
                    ("layer_norm",) if _models._layer_norm_probe(module) else "not a 1-d affine LayerNorm"
                )
            else:
                w: Any = module.weight
                key: tuple[Any, ...] = (cls, w.numel(), w.dtype)
                if key not in probed:
                    probed[key] = _models._norm_probe(module)
                found = probed[key]
            if isinstance(found, str):
                skipped[name] = found
                continue
            func_cls = _LayerNormFunc if found == ("layer_norm",) else _NORM_FUNCS.get(found)
            if func_cls is None:
                skipped[name] = (
                    f"tierkit's hub layers have no {found[0]} norm with offset {found[1]} and {found[2]}"
                )
                continue
            if _hub_name(cls) == func_cls.kernel_layer_name:
                pass  # transformers named it: kernelize replaces it with tierkit's layer as it is
            elif _hub_name(cls) is not None:
                skipped[name] = (
                    f"transformers names it {_hub_name(cls)!r}, tierkit computes {func_cls.kernel_layer_name!r}"
                )
                continue
            else:
                func = func_cls(module)
                _models.keep_through_copies(func)
                module.__dict__.setdefault("_kernel_funcs", {})[_NORM_FUNC] = func
                _models.bind(module, ("hub", "norm"))
            module.__dict__[_MARK] = True
            _models.keep_through_copies(module)
            counts["norm"] += 1
        elif _models._rotary_site(cls.forward) is not None:
            key = (cls, getattr(module, "head_dim", None))
            if key not in probed:
                probed[key] = _models._rotary_probe(module)
            why = probed[key]
            funcs = module.__dict__.get("_kernel_funcs") or {}
            if why is not None:
                skipped[name] = why
                if (
                    ROTARY_FUNC in funcs
                ):  # a hub function of transformers' that tierkit's layer would get wrong
                    funcs[ROTARY_FUNC] = _Stock(cls)
                continue
            if ROTARY_FUNC not in funcs:  # transformers did not make it a hub function: one of its own
                rotary_func = _RotaryFunc(cls)
                _models.keep_through_copies(rotary_func)
                module.__dict__.setdefault("_kernel_funcs", {})[ROTARY_FUNC] = rotary_func
                _models.bind(module, ("hub", "rotary"))
            module.__dict__[_MARK] = True
            counts["rotary"] += 1
    _models.warn_skipped("tierkit_torch.hub.mark", skipped)
    return counts


ROTARY_FUNC = "rotary_pos_emb"  # the key kernels' use_kernelized_func gives transformers' (its hub name)


class _Stock(_RotaryFunc):
    """Stands in for a transformers hub function tierkit's layer would get
    wrong: a name no mapping has, so kernelize keeps the stock function."""

    kernel_layer_name = "tierkit_not_replaceable"

    def forward(self, *args, **kwargs):
        return _models.stock_rotary(self._cls)(*args, **kwargs)


def kernelize(model: torch.nn.Module, mode: Any = None, device: str = "cpu") -> torch.nn.Module:
    """``mark(model)``, then ``kernels.kernelize`` with tierkit's mapping (default mode: inference)."""
    import kernels

    model = _models.unwrap_model(model, "tierkit_torch.hub.kernelize")
    mark(model)
    with kernels.use_kernel_mapping(mapping()):
        out = kernels.kernelize(
            model, device=device, mode=mode if mode is not None else kernels.Mode.INFERENCE
        )
    for module in model.modules():  # the forwards kernels bound: kept through pickle and copies
        if _models._spec_of(module) is not None:
            _models.keep_through_copies(module)
    return out
