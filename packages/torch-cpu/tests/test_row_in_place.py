"""The in-place row ops in the tierkit namespace, every ROW_IN_PLACE entry of
the op table (vLLM's cached rotary embedding): torch-common's shared suite
(vLLM's formula and bits, the layouts vLLM passes, errors real and fake,
derivatives refused, opcheck, compile)."""

import pytest
import tierkit_torch  # noqa: F401  (loads the ops)
import torch
from tierkit_torch_common.in_place_suite import *  # noqa: F403  (the shared tests, collected here)


@pytest.fixture
def ops():
    return torch.ops.tierkit
