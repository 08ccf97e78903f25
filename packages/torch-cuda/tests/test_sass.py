"""No fused multiply-add in the kernels' machine code of ops that promise
eager's roundings (ulps 0 in the op table): eager torch (and the CPU tiers)
round a*b and a*b+c separately, an FFMA/DFMA rounds once, and the GPU tests
compare bits. Checked on the SASS itself (cuobjdump), so it holds
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
from tierkit_core.op_table import OPS

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


def _of(op, kernel: str) -> bool:
    """Whether a (mangled) kernel name instantiates `op`'s functor <Functor>F:
    the Itanium ABI spells a name by its length first (8SiluMulF), so MulF is
    not found inside SiluMulF."""
    name = f"{op.functor}F"
    return re.search(rf"(?<!\d){len(name)}{name}I", kernel) is not None


def test_every_op_has_kernels_in_the_library():
    _, kernels = fused_per_kernel()
    for op in OPS:
        assert any(_of(op, k) for k in kernels), op.functor


def _row_reduction(kernel: str) -> bool:
    """The row reductions' kernels (row_kernels.cu): their sums' order is the
    GPU's own, so they promise the CPU's results within rounding, not bits;
    their IEEE division and square root use FFMA inside CUDA's own code, their
    own arithmetic is the _rn forms."""
    return re.search(r"(?<!\d)\d+(row_forward|row_backward|slot_sum)_kernelI", kernel) is not None


def test_no_fused_multiply_add_where_an_op_promises_eagers_roundings():
    # Ops of + - * only (ulps 0 in the op table) must round each operation
    # as eager does. A transcendental op's exp and IEEE division use FFMA
    # inside CUDA's own implementations (eager's kernels too); its own
    # arithmetic still uses the _rn forms, and its entry allows ulps.
    counts, kernels = fused_per_kernel()
    assert kernels
    exempt = [op for op in OPS if op.ulps > 0]
    strict = {
        k: n for k, n in counts.items() if not _row_reduction(k) and not any(_of(op, k) for op in exempt)
    }
    assert not strict, "fused multiply-add (FFMA/DFMA/HFMA2 on data) in: " + ", ".join(
        f"{k} ({n})" for k, n in strict.items()
    )
    assert all(_row_reduction(k) or any(_of(op, k) for op in exempt) for k in counts), (
        "only exempt ops' kernels may fuse"
    )


# Registers and local memory per kernel (cuobjdump -res-usage): a spill to
# local memory in a row loop costs a memory round trip per element.
RES_USAGE = re.compile(r"Function (\S+):\s+REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
MAX_REGISTERS = 64  # row_kernels.cu's __launch_bounds__(256, kMinBlocks = 4)


def res_usage() -> dict[str, tuple[int, int, int]]:
    out = subprocess.run(
        [cuobjdump(), "-res-usage", tierkit_cuda.library_path()], capture_output=True, text=True, check=True
    ).stdout
    return {m[1]: (int(m[2]), int(m[3]), int(m[5])) for m in RES_USAGE.finditer(out)}


def test_row_reduction_kernels_do_not_spill():
    usage = {k: v for k, v in res_usage().items() if _row_reduction(k)}
    # Per entry of the kind and dtype: forward (2 row mappings x plain/add) and
    # backward (2); per dtype: the slots' sum.
    from tierkit_core.op_table import ROW_REDUCTIONS

    # Forward: 2 row mappings, plain and (an entry with a fused form) add; backward: 2.
    per_dtype = sum((4 if e.fused_add else 2) + 2 for e in ROW_REDUCTIONS) + 1
    assert len(usage) == 4 * per_dtype, sorted(usage)
    # An along-a-dim kind's double backward (an exp per element) runs two blocks an SM: 128 registers.
    wide = [f"{e.functor}RowsF" for e in ROW_REDUCTIONS if e.has_dim]
    for kernel, (registers, stack, local) in usage.items():
        assert local == 0 and stack == 0, f"{kernel}: {local} bytes of local memory, {stack} of stack"
        double_exp = "row_backward" in kernel and "RowsFEd" in kernel and any(w in kernel for w in wide)
        assert registers <= MAX_REGISTERS * (2 if double_exp else 1), f"{kernel}: {registers} registers"
    regs = sorted(r for r, _, _ in usage.values())
    print(f"row-reduction kernels: {len(usage)}, registers {regs[0]}..{regs[-1]}, no local memory, no stack")
