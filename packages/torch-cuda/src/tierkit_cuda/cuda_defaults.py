"""Where tierkit's CUDA builds look when the environment does not say: the
one home of these defaults. Pure data and stdlib, so setup.py, the noxfile
and ``tierkit doctor`` read this file by path without importing torch."""

from __future__ import annotations

import os
from pathlib import Path

# The toolkit root (holding bin/nvcc and lib64/libcudart.so), not the
# directory of a wrapper nvcc on PATH (torch would guess /usr/local there).
CUDA_HOME = "/usr/local/cuda"
# Compute capability to build for when TORCH_CUDA_ARCH_LIST is unset.
TORCH_CUDA_ARCH_LIST = "9.0"


def cuda_home(environ: dict | None = None) -> str:
    """CUDA_HOME from the environment, else the default when it holds nvcc, else ""."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_HOME"):
        return env["CUDA_HOME"]
    return CUDA_HOME if Path(CUDA_HOME, "bin", "nvcc").exists() else ""


def arch_list(environ: dict | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("TORCH_CUDA_ARCH_LIST") or TORCH_CUDA_ARCH_LIST
