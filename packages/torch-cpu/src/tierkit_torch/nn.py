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
from tierkit_core.op_table import ROW_REDUCTIONS, RowReduction

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


_MODULE = """\
class {module}(torch.nn.Module):
    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps={eps}, elementwise_affine=True,{bias_arg} device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _one_dim("{module}", normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
{params}        self.reset_parameters()

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
            return torch.ops.tierkit.{name}(x, {args}, self.eps)
        return face(x, {args}, self.eps)

    def extra_repr(self):
        return "{{normalized_shape}}, eps={{eps}}, elementwise_affine={{elementwise_affine}}".format(**self.__dict__)
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
    resets = "".join(
        f"        if self.{p} is not None:\n            torch.nn.init.{'zeros_' if p == 'bias' else 'ones_'}"
        f"(self.{p})\n"
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
    )
    filename = f"<tierkit_torch.nn: {entry.module}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    scope: dict[str, Any] = {
        "torch": torch,
        "Tensor": torch.Tensor,
        "_one_dim": _one_dim,
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
    )
    cls.__module__ = "tierkit_torch.nn"
    return cls


for _entry in ROW_REDUCTIONS:
    if _entry.module:
        globals()[_entry.module] = _module(_entry)

if TYPE_CHECKING:  # the classes are made at import; to a type checker, each is a module class
    RMSNorm: Any
    LayerNorm: Any
