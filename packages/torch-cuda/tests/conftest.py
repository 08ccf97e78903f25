import pytest
import tierkit_cuda  # noqa: F401  (loads tierkit_torch, then the CUDA kernels)
import torch

HAS_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(
    not HAS_GPU, reason="no CUDA device here (torch.cuda.is_available() is False); these run where a GPU is"
)
OPS = [
    "custom_add",
    "mul",
    "scale_shift",
    "muladd",
    "add_out",
    "custom_add.out",
    "mul.out",
    "scale_shift.out",
    "muladd.out",
]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
