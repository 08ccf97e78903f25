"""The row reductions' Python side (rms_norm and its family, the op table's
RowReduction entries): typed faces, vmap rules and DTensor strategies, all
torch-common's (tierkit_torch_common.norms, shared with torch-stable), for
the ``tierkit`` namespace. Fake kernels are torch-common's too
(register_row_reduction_fakes); kernels and autograd are C++
(csrc/rms_norm.cpp, csrc/rms_norm_autograd.cpp). See docs/reductions.md.
"""

from __future__ import annotations

import torch
from tierkit_torch_common.norms import (
    register_row_reduction_sharding,
    register_row_reduction_vmap,
    row_reduction_faces,
)

_faces = row_reduction_faces(torch.ops.tierkit)
rms_norm = _faces["rms_norm"]
add_rms_norm = _faces["add_rms_norm"]
add_rms_norm_ = _faces["add_rms_norm_"]
for _f in _faces.values():
    _f.__module__ = "tierkit_torch.ops"


def register_vmap() -> None:
    register_row_reduction_vmap(torch, "tierkit")


def register_sharding() -> None:
    register_row_reduction_sharding(torch, "tierkit")
