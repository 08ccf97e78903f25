"""The norms' casting modes (offset, casting_mode) on the stable tier:
torch-common's shared casting suite, every entry with casting modes times
every mode, in tierkit_stable:: (composites over its plain ops, so the
modes' autograd is the plain ops' Python autograd)."""

import pytest
import tierkit_torch_stable  # noqa: F401  (loads the ops)
import torch
from tierkit_torch_common.casting_suite import *  # noqa: F403  (the shared tests, collected here)


@pytest.fixture
def ops():
    return torch.ops.tierkit_stable
