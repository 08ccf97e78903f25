"""Modules over the row reductions, one per op-table entry that names one
(``RowReduction.module``): ``tierkit_torch.RMSNorm`` and
``tierkit_torch.LayerNorm``, drop-ins for ``torch.nn.RMSNorm`` and
``torch.nn.LayerNorm`` over the last dimension. Their state dicts are
torch's (``weight``, and ``bias`` where the entry has one; none without
affine), so ``load_state_dict`` works both ways.

Each class is made from one template (_MODULE) per entry, so that its
``forward`` names its operator literally, as ``torch.jit.script`` needs; the
source is registered with linecache, where TorchScript's ``inspect`` looks.
"""

from __future__ import annotations

import linecache
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from tierkit_core.op_table import CASTING_MODES, ROW_REDUCTIONS, RowReduction

from ._rows import FACES

__all__ = [entry.module for entry in ROW_REDUCTIONS if entry.module]


def _one_dim(module: str, normalized_shape: Any) -> tuple[int]:
    if isinstance(normalized_shape, numbers.Integral):
        shape: tuple[int, ...] = (int(normalized_shape),)
    else:
        shape = tuple(int(s) for s in cast("Sequence[int]", normalized_shape))
    if len(shape) != 1:
        raise ValueError(
            f"tierkit_torch.{module}: normalized_shape: expected one dimension (tierkit normalises the last), "
            f"got {shape}"
        )
    return (shape[0],)


def _check_mode(module: str, casting_mode: Any) -> None:
    names = [m.name for m in CASTING_MODES]
    if casting_mode not in names:
        raise ValueError(
            f"tierkit_torch.{module}: casting_mode: expected one of {names}, got {casting_mode!r}"
        )


_MODULE = """\
class {module}(torch.nn.Module):
    __constants__ = ["normalized_shape", "eps", "elementwise_affine"{casting_constants}]

    def __init__(self, normalized_shape, eps={eps}, elementwise_affine=True,{bias_arg} device=None, dtype=None{casting_arg}):
        super().__init__()
        self.normalized_shape = _one_dim("{module}", normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
{casting_init}{params}        self.reset_parameters()

    def reset_parameters(self):
{resets}        pass

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 0 or x.shape[-1] != self.normalized_shape[0]:
            raise RuntimeError(
                "tierkit_torch.{module}: input: expected a last dimension of " + str(self.normalized_shape[0])
                + " (normalized_shape), got shape " + str(list(x.shape))
            )
        if torch.jit.is_scripting():
            # TorchScript (deprecated in torch, still used for old deployments)
            # calls the operator itself; the typed face is Python.
            return torch.ops.tierkit.{name}(x, {args}, self.eps{casting_call})
        return face(x, {args}, self.eps{casting_call})

    def extra_repr(self):
        return "{{normalized_shape}}, eps={{eps}}, elementwise_affine={{elementwise_affine}}{casting_repr}".format(**self.__dict__)
"""


def _module(entry: RowReduction) -> type:
    has_bias = "bias" in entry.params
    lines = []
    for p in entry.params:
        cond = "elementwise_affine and bias" if p == "bias" else "elementwise_affine"
        lines.append(
            f"        if {cond}:\n"
            f"            self.{p} = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, "
            f"dtype=dtype))\n"
            f"        else:\n"
            f'            self.register_parameter("{p}", None)\n'
        )
    # The weight starts where the module is the plain norm: 1, or 1 - offset
    # with an offset (Gemma's zeros with offset 1).
    resets = "".join(
        f"        if self.{p} is not None:\n            "
        + (
            f"torch.nn.init.zeros_(self.{p})\n"
            if p == "bias"
            else (
                f"torch.nn.init.constant_(self.{p}, 1.0 - self.offset)\n"
                if entry.casting
                else f"torch.nn.init.ones_(self.{p})\n"
            )
        )
        for p in entry.params
    )
    source = _MODULE.format(
        module=entry.module,
        name=entry.name,
        eps="None" if entry.eps is None else repr(entry.eps),
        bias_arg=" bias=True," if has_bias else "",
        params="".join(lines),
        resets=resets,
        args=", ".join(f"self.{p}" for p in entry.params),
        casting_constants=', "offset", "casting_mode"' if entry.casting else "",
        casting_arg=', offset=0.0, casting_mode="aten"' if entry.casting else "",
        casting_init=(
            "        self.offset = float(offset)\n        self.casting_mode = casting_mode\n"
            '        _check_mode("' + entry.module + '", casting_mode)\n'
            if entry.casting
            else ""
        ),
        casting_call=", offset=self.offset, casting_mode=self.casting_mode" if entry.casting else "",
        casting_repr=", offset={offset}, casting_mode={casting_mode}" if entry.casting else "",
    )
    filename = f"<tierkit_torch.nn: {entry.module}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    scope: dict[str, Any] = {
        "torch": torch,
        "Tensor": torch.Tensor,
        "_one_dim": _one_dim,
        "_check_mode": _check_mode,
        "face": FACES[entry.name],
        "__name__": __name__,
    }
    exec(compile(source, filename, "exec"), scope)
    cls = scope[entry.module]
    eps_text = (
        "torch's default (the compute type's machine epsilon)" if entry.eps is None else repr(entry.eps)
    )
    cls.__doc__ = (
        f"``tierkit::{entry.name}`` as a module: {entry.doc}, over the last dimension.\n\n"
        f"Arguments as ``torch.nn.{entry.module}``'s; ``normalized_shape`` must name one dimension (tierkit's "
        f"kernels normalise the last). ``eps`` defaults to {eps_text}. The parameters have the module's dtype; "
        f"an input of another float dtype is computed as ``torch.nn.{entry.module}`` computes it (float32 "
        "parameters under bfloat16 autocast: in float32, the output in the input's dtype). "
        f"``torch.jit.script`` compiles it, as ``torch.nn.{entry.module}``."
        + (
            " ``offset`` and ``casting_mode`` are the operator's (see its doc): a Hugging Face model's norm is "
            '``offset=0.0, casting_mode="llama"`` (Llama, Mistral, Qwen2/3, Phi-3) or ``offset=1.0, '
            'casting_mode="gemma"`` (Gemma 1/2/3); the weight starts at ``1 - offset``, where the module is '
            "the plain norm."
            if entry.casting
            else ""
        )
    )
    cls.__module__ = "tierkit_torch.nn"
    return cls


for _entry in ROW_REDUCTIONS:
    if _entry.module:
        globals()[_entry.module] = _module(_entry)

if TYPE_CHECKING:  # the classes are made at import; to a type checker, each is a module class
    RMSNorm: Any
    LayerNorm: Any
