"""The typed Python face of the tierkit_stable operators: one function per
entry of the op table, the same functions and rules as
:mod:`tierkit_torch.ops` (see their docstrings), over ``torch.ops.tierkit_stable``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from tierkit_torch_common.fake import typed_faces

from ._rows import FACES as _ROW_REDUCTIONS

_FACES = {**typed_faces(torch, torch.ops.tierkit_stable, "tierkit_torch_stable"), **_ROW_REDUCTIONS}
globals().update(_FACES)
__all__ = sorted(_FACES)

if TYPE_CHECKING:  # the functions are made at import; to a type checker, each is a callable

    def __getattr__(name: str) -> Callable[..., Any]: ...
