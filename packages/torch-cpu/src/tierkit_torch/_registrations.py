"""Python-side registrations for the tierkit ops: fake (meta) kernels, vmap
rules (_vmap.py), DTensor sharding (_sharding.py), and the batch rules of
the norms' casting modes (torch-common's casting; their composites are C++,
csrc/row_casting.cpp).

The fake kernels are core's generic ones (tierkit_torch_common.fake, shared with
torch-stable), registered against the schemas the C++ library defined: the
functional ops. The ``.out`` overloads and add_out need none: under fake
tensors they decompose (their CompositeImplicitAutograd kernels,
csrc/composite.cpp) into the functional op's fake kernel plus a copy.
Autograd is in C++ (csrc/autograd.cpp), where the no-grad path costs nothing
measurable.
"""

from __future__ import annotations

import torch
from tierkit_torch_common.casting import register_row_casting
from tierkit_torch_common.fake import register_fake_kernels
from tierkit_torch_common.row_ops import register_row_op_fakes

from . import _rows, _sharding, _vmap

_registered = False
_lib: torch.library.Library | None = None  # the casting composites' registrations live as long as it


def register() -> None:
    """Register the fake kernels, vmap rules and DTensor sharding (once per process)."""
    global _registered, _lib
    if _registered:
        return
    # The accepted dtypes come from core's dtype table, through the C++ library.
    accepted = list(torch.ops.tierkit._accepted_dtypes())
    register_fake_kernels(torch, "tierkit", accepted)
    register_row_op_fakes(torch, "tierkit", accepted)
    _lib = torch.library.Library("tierkit", "IMPL")
    register_row_casting(torch, "tierkit", accepted, _lib, composites=False)  # the composites: C++
    _vmap.register()
    _rows.register_vmap()
    _sharding.install()
    _registered = True
