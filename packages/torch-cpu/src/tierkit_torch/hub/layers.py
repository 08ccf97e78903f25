"""The layers ``kernels.kernelize`` puts in a model's place (the mapping:
``tierkit_torch.hub.mapping()``; the local repository's variants re-export
these). Each is stateless and reads the module it replaces the forward of
(``self.weight``, ``self.variance_epsilon``), as ``kernels`` requires: no
``__init__``, no members but the two flags. They live in an importable
module so that a kernelized model pickles (a forward is pickled by name)."""

from torch import nn

import tierkit_torch


class RMSNorm(nn.Module):
    """transformers' ``"RMSNorm"`` hub name (Llama, Mistral, Qwen2/3, Phi-3): ``weight * x_hat.to(dtype)``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states):
        return tierkit_torch.rms_norm(hidden_states, self.weight, self.variance_epsilon, casting_mode="llama")


class GemmaRMSNorm(nn.Module):
    """transformers' Gemma 1/2/3 norms: ``(x_hat * (1 + weight.float())).to(dtype)``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x):
        return tierkit_torch.rms_norm(x, self.weight, self.eps, offset=1.0, casting_mode="gemma")


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm over the last dim (GPT-2's)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input):
        return tierkit_torch.layer_norm(input, self.weight, self.bias, self.eps)


class RotaryPosEmb(nn.Module):
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` (partial width too)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        return tierkit_torch.models.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
