"""Everything the stable C++ API cannot register: the fake kernels (core's,
generic over the namespace, shared with tierkit-torch), autograd, the
.out overloads' composite form for torch.compile, and the norms' casting
modes (torch-common's composites over the plain ops)."""

from __future__ import annotations

import torch
from tierkit_torch_common.casting import register_row_casting
from tierkit_torch_common.fake import register_fake_kernels
from tierkit_torch_common.row_maps import register_row_map_autograd
from tierkit_torch_common.row_ops import register_row_op_fakes

from . import _autograd, _composite, _rows

_lib: torch.library.Library | None = None


def register() -> None:
    """Once per process (the Library object must stay alive)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("tierkit_stable", "IMPL")
    # The accepted dtypes come from core's dtype table, through the C++ library.
    accepted = list(torch.ops.tierkit_stable._accepted_dtypes())
    register_fake_kernels(torch, "tierkit_stable", accepted, lib=_lib)
    register_row_op_fakes(torch, "tierkit_stable", accepted)
    register_row_casting(torch, "tierkit_stable", accepted, _lib)
    register_row_map_autograd(torch, "tierkit_stable", accepted, _lib)  # the row maps' autograd
    _autograd.register(_lib)
    _rows.register(_lib)
    _composite.register(_lib)
