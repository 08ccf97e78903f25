"""The typed Python face of the tierkit operators, one function per entry of
the op table (``tierkit_core.op_table``): ``name(tensors..., floats..., *,
out=None)`` over ``torch.ops.tierkit.*``. The dispatcher picks the kernel
(CPU here, CUDA from tierkit-cuda, fake under ``torch.compile``), so these
add only the signature, the float arguments' checks and documentation
(``help(tierkit_torch.ops.<op>)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from tierkit_torch_common.fake import typed_faces

_FACES = typed_faces(torch, torch.ops.tierkit, "tierkit_torch")
globals().update(_FACES)

# The row reductions' faces are written for their kind (_norms.py).
from ._norms import add_rms_norm as add_rms_norm  # noqa: E402
from ._norms import add_rms_norm_ as add_rms_norm_  # noqa: E402
from ._norms import rms_norm as rms_norm  # noqa: E402

__all__ = sorted([*_FACES, "add_rms_norm", "add_rms_norm_", "rms_norm"])

if TYPE_CHECKING:  # the functions are made at import; to a type checker, each is a callable

    def __getattr__(name: str) -> Callable[..., Any]: ...
