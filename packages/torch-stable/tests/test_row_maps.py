"""The row maps (rotary embeddings) on the stable tier: torch-common's shared
map suite in tierkit_stable:: (core's kernels, so tierkit::'s bits; autograd
from Python, torch-common's, as tierkit::'s)."""

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the ops)
import torch
from tierkit_torch_common.map_suite import *  # noqa: F403  (the shared tests, collected here)


@pytest.fixture
def ops():
    return torch.ops.tierkit_stable
