"""tierkit's layers for the Hugging Face ``kernels`` package, served from this
local repository (``tierkit_torch.hub.repo_path()``; no Hub). The classes
live in ``tierkit_torch.hub.layers`` (importable, so a kernelized model
pickles); this variant only names them."""

from . import layers

__all__ = ["layers"]
