import pytest
import tierkit_torch  # noqa: F401  (loads the ops)
import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)
