"""What the stable tier's table-driven suites share: the generator the shared
suites (torch-common's row, casting and map suites) draw their inputs from."""

import pytest
import torch


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)
