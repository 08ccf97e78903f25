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

# The row reductions' faces, written for their kind (_rows.py).
from ._rows import FACES as _ROW_FACES  # noqa: E402

globals().update(_ROW_FACES)

__all__ = sorted([*_FACES, *_ROW_FACES])

if TYPE_CHECKING:  # the functions are made at import; to a type checker, each is a callable

    def __getattr__(name: str) -> Callable[..., Any]: ...
