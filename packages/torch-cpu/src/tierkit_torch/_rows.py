"""The row kinds' Python side (every ROW_REDUCTIONS and ROW_MAPS entry of the op
table) for the ``tierkit`` namespace: typed faces, vmap rules and DTensor
strategies, all torch-common's (tierkit_torch_common.rows, shared with
torch-stable). Fake kernels are torch-common's too; kernels and autograd are
C++ (csrc/row_ops.cpp, csrc/row_autograd.cpp). See docs/reductions.md.
"""

from __future__ import annotations

import torch
from tierkit_torch_common.row_maps import register_row_map_sharding
from tierkit_torch_common.row_ops import row_op_faces
from tierkit_torch_common.rows import register_row_sharding, register_row_vmap

# Both row kinds' faces: the reductions' and the maps'.
FACES = row_op_faces(torch.ops.tierkit, "tierkit_torch")


def register_vmap() -> None:
    register_row_vmap(torch, "tierkit")


def register_sharding() -> None:
    register_row_sharding(torch, "tierkit")
    register_row_map_sharding(torch, "tierkit")
