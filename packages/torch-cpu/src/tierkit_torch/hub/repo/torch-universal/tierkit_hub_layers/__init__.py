"""tierkit's layers for the Hugging Face ``kernels`` package, served from this
local repository (``tierkit_torch.hub.repo_path()``; no Hub)."""

from . import layers

__all__ = ["layers"]
