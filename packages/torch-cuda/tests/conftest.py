import pytest
import tierkit_cuda  # noqa: F401  (loads tierkit_torch, then the CUDA kernels)
import torch
from tierkit_core.op_table import OPS as TABLE
from tierkit_core.op_table import OUT_WRITERS, ROW_REDUCTIONS

HAS_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(
    not HAS_GPU, reason="no CUDA device here (torch.cuda.is_available() is False); these run where a GPU is"
)
# Every op of the op table, its .out overload, the writers (add_out) and
# the row reductions (rms_norm's family).
OPS = [
    *(r.name for r in ROW_REDUCTIONS),
    *(op.name for op in TABLE),
    *(w.name for w in OUT_WRITERS),
    *(f"{op.name}.out" for op in TABLE),
]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def last(entry, eps=1e-5):
    """A row op's last argument in a call over the last dim: its eps, or its dim (-1)."""
    return -1 if entry.has_dim else eps
