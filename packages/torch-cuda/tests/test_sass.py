"""No fused multiply-add in the kernels' machine code: eager torch (and the
CPU tiers) round a*b and a*b+c separately, an FFMA/DFMA rounds once, and the
GPU tests compare bits. Checked on the SASS itself (cuobjdump), so it holds
without a GPU and whatever flags a future edit drops."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import tierkit_cuda

# FFMA/DFMA, and HFMA2 on data. nvcc also emits `HFMA2.MMA Rd, -RZ, RZ, imm,
# imm` (0 * 0 + constant) merely to load a constant into a register: no
# rounding of anything computed, so that form is allowed.
FUSED = re.compile(r"\b(FFMA|DFMA)\b|\bHFMA2(\.\w+)*\s+R\d+,(?!\s*-RZ,\s*RZ,)")


def cuobjdump() -> str:
    """The toolkit's cuobjdump, else the one triton ships (the minimal toolkit has none)."""
    for candidate in (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump"),):
        if candidate.is_file():
            return str(candidate)
    spec = importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        shipped = Path(spec.submodule_search_locations[0], "backends", "nvidia", "bin", "cuobjdump")
        if shipped.is_file():
            return str(shipped)
    found = shutil.which("cuobjdump")
    if found is None:
        pytest.skip("no cuobjdump here (neither in CUDA_HOME nor in the triton package)")
    return found


def fused_per_kernel() -> tuple[Counter, list[str]]:
    sass = subprocess.run(
        [cuobjdump(), "-sass", tierkit_cuda.library_path()], capture_output=True, text=True, check=True
    ).stdout
    counts: Counter = Counter()
    kernels: list[str] = []
    current = None
    for line in sass.splitlines():
        match = re.search(r"Function : (\S+)", line)
        if match:
            current = match.group(1)
            kernels.append(current)
        elif current and FUSED.search(line):
            counts[current] += 1
    return counts, kernels


def test_the_pattern_tells_fused_arithmetic_from_constant_moves():
    fused = [
        "FFMA R4, R2, R3, R5 ;",
        "DFMA R4, R2, R6, R8 ;",
        "HFMA2 R4, R2, R3, R5 ;",
        "HFMA2.MMA R4, R2, R3, -RZ ;",
    ]
    plain = [
        "FMUL R4, R2, R3 ;",
        "FADD R4, R2, R3 ;",
        "HFMA2.MMA R3, -RZ, RZ, 0, 0 ;",
        "HADD2.F32 R2, -RZ, R2.H0_H0 ;",
    ]
    assert all(FUSED.search(line) for line in fused)
    assert not any(FUSED.search(line) for line in plain)


def test_every_op_has_kernels_in_the_library():
    _, kernels = fused_per_kernel()
    for functor in ("AddF", "MulF", "ScaleShiftF", "MulAddF"):
        assert any(functor in k for k in kernels), functor


def test_no_fused_multiply_add_in_any_kernel():
    counts, kernels = fused_per_kernel()
    assert kernels
    assert not counts, "fused multiply-add (FFMA/DFMA/HFMA2 on data) in: " + ", ".join(
        f"{k} ({n})" for k, n in counts.items()
    )
