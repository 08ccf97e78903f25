"""The row ops' Python side (every ROW_OPS entry of the op table) for the
``tierkit`` namespace: typed faces and DTensor strategies (torch-common's
row_ops adapter, shared with torch-stable), the reductions' vmap rules
(tierkit_torch_common.rows). Fake kernels are torch-common's too; kernels
and autograd are C++ (csrc/row_ops.cpp, csrc/row_autograd.cpp). See
docs/reductions.md.
"""

from __future__ import annotations

import torch
from tierkit_torch_common.row_ops import register_row_op_sharding, row_op_faces
from tierkit_torch_common.rows import register_row_vmap

FACES = row_op_faces(torch.ops.tierkit, "tierkit_torch")


def register_vmap() -> None:
    register_row_vmap(torch, "tierkit")


def register_sharding() -> None:
    register_row_op_sharding(torch, "tierkit")
