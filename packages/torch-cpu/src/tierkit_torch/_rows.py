"""The row ops' Python side (every ROW_OPS entry of the op table) for the
``tierkit`` namespace: typed faces, vmap rules and DTensor strategies
(torch-common's row_ops adapter, shared with torch-stable). Fake kernels are torch-common's too; kernels
and autograd are C++ (csrc/row_ops.cpp, csrc/row_autograd.cpp). See
docs/reductions.md.
"""

from __future__ import annotations

import torch
from tierkit_torch_common.row_ops import register_row_op_sharding, register_row_op_vmap, row_op_faces

FACES = row_op_faces(torch.ops.tierkit, "tierkit_torch")


def register_vmap() -> None:
    register_row_op_vmap(torch, "tierkit")


def register_sharding() -> None:
    register_row_op_sharding(torch, "tierkit")
