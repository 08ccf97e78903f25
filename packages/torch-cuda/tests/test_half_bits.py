"""The kernels' 16-bit conversions (csrc/half_bits.h, used by device_math.cuh)
give core's bits, NaNs included, over every input each helper handles:
checked on the host, no GPU needed (the helpers are __host__ __device__),
by compiling tests/half_bits_test.cpp with the host's C++ compiler. Where
CUDA's headers are (CUDA_HOME/include), the same program checks what
half_bits.h says of CUDA's own conversions through their host emulations:
core's bits for every non-NaN input, 0x7fff for every NaN (core: float16
sign | 0x7e00, bfloat16 (x >> 16) | 0x40), the reason the kernels do not
use them for NaN."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import tierkit_core

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent / "csrc"


def compiler() -> str:
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    pytest.skip("no C++ compiler here (CXX, c++, g++ or clang++)")


def test_conversion_helpers_give_cores_bits(tmp_path):
    exe = tmp_path / "half_bits_test"
    command = [
        compiler(),
        "-std=c++20",
        "-O2",
        "-Wall",
        f"-I{CSRC}",
        f"-I{tierkit_core.get_include()}",
        str(HERE / "half_bits_test.cpp"),
        "-o",
        str(exe),
    ]
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
    with_cuda = (cuda_include / "cuda_fp16.h").is_file() and (cuda_include / "cuda_bf16.h").is_file()
    if with_cuda:
        command[1:1] = [f"-I{cuda_include}", "-DTIERKIT_CUDA_HEADERS"]
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, " ".join(command) + "\n" + built.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ok ") == (4 if with_cuda else 3), run.stdout
