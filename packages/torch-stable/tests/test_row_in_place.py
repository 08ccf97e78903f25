"""The in-place row ops on the stable tier, every ROW_IN_PLACE entry of the
op table in tierkit_stable:: (vLLM's cached rotary embedding): torch-common's
shared suite, as tierkit:: runs it; core's functor is tierkit::'s, so the
bits are too."""

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the ops)
import torch
from tierkit_torch_common.in_place_suite import *  # noqa: F403  (the shared tests, collected here)


@pytest.fixture
def ops():
    return torch.ops.tierkit_stable
