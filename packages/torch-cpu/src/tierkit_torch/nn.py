"""``tierkit_torch.RMSNorm``: a drop-in for ``torch.nn.RMSNorm`` over the last
dimension, on ``tierkit::rms_norm``. Its state dict is torch's (one ``weight``,
or none without affine), so ``load_state_dict`` works both ways."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import ClassVar, cast

import torch
from torch import Tensor

from ._norms import rms_norm


class RMSNorm(torch.nn.Module):
    """``y = x / sqrt(mean(x², -1) + eps) * weight`` over the last dimension.

    Arguments as ``torch.nn.RMSNorm``'s; ``normalized_shape`` must name one
    dimension (tierkit's kernels normalise the last). ``eps=None`` is
    torch's default (the compute type's machine epsilon). The weight has the
    module's dtype; an input of another float dtype is computed as
    ``torch.nn.RMSNorm`` computes it (a float32 weight under bfloat16
    autocast: in float32, the output in the input's dtype).
    ``torch.jit.script`` compiles it, as ``torch.nn.RMSNorm``.
    """

    __constants__: ClassVar[list[str]] = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(
        self,
        normalized_shape: int | list[int] | tuple[int, ...] | torch.Size,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            shape: tuple[int, ...] = (int(normalized_shape),)
        else:
            shape = tuple(int(s) for s in cast("Sequence[int]", normalized_shape))
        if len(shape) != 1:
            raise ValueError(
                "tierkit_torch.RMSNorm: normalized_shape: expected one dimension (tierkit normalises the last), "
                f"got {shape}"
            )
        self.normalized_shape = (int(shape[0]),)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 0 or x.shape[-1] != self.normalized_shape[0]:
            raise RuntimeError(
                f"tierkit_torch.RMSNorm: input: expected a last dimension of {self.normalized_shape[0]} "
                f"(normalized_shape), got shape {list(x.shape)}"
            )
        if torch.jit.is_scripting():
            # TorchScript (deprecated in torch, still used for old deployments)
            # calls the operator itself; the typed face is Python.
            return torch.ops.tierkit.rms_norm(x, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(
            **self.__dict__
        )
