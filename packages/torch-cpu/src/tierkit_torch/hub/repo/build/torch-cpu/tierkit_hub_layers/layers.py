"""The layers ``kernels.kernelize`` puts in a model's place: tierkit_torch.hub.layers'."""

from tierkit_torch.hub.layers import GemmaRMSNorm, LayerNorm, RMSNorm, RotaryPosEmb

__all__ = ["GemmaRMSNorm", "LayerNorm", "RMSNorm", "RotaryPosEmb"]
