"""Build of tierkit-torch-stable: one shared library,
tierkit_torch_stable/libtierkit_stable_ops.so, written against torch's stable
C ABI only, so the one wheel loads on every torch from MIN_TORCH on. No
Python in the library (it is loaded with torch.ops.load_library), hence a
py_limited_api wheel (cp310-abi3). Metadata is in pyproject.toml.

    pip install --no-build-isolation packages/torch-stable

Build with any torch >= MIN_TORCH: TORCH_TARGET_VERSION makes the headers
refuse, at compile time, any API newer than MIN_TORCH.
"""

from __future__ import annotations

from pathlib import Path

import tierkit_core
import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from tierkit_torch_common.build import debug_info_flags, longest_first, python_free, torch_facts
from torch.utils.cpp_extension import CppExtension

HERE = Path(__file__).resolve().parent
MIN_TORCH = (2, 13)  # keep in step with tierkit_torch_stable.MIN_TORCH (a test checks)
# [major][minor][patch][5 bytes of ABI tag], torch/headeronly/version.h's layout.
TARGET = (MIN_TORCH[0] << 56) | (MIN_TORCH[1] << 48)

compile_args = [
    "-O3",
    *tierkit_core.cxx_flags(),  # no OpenMP runtime: threads come from torch_parallel_for
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    f"-DTORCH_TARGET_VERSION=0x{TARGET:016x}",
    *debug_info_flags(),
]


class BuildPyWithInfo(build_py):
    def run(self):
        super().run()
        (Path(self.build_lib) / "tierkit_torch_stable" / "_build_info.py").write_text(
            torch_facts(torch, TORCH_TARGET_VERSION=".".join(map(str, MIN_TORCH)), STABLE_ABI=True)
        )


setup(
    install_requires=[
        f"torch>={'.'.join(map(str, MIN_TORCH))}",
        f"tierkit-core=={(HERE / 'VERSION').read_text().strip()}",
        f"tierkit-torch-common=={(HERE / 'VERSION').read_text().strip()}",
    ],
    ext_modules=[
        python_free(
            CppExtension(
                "tierkit_torch_stable.libtierkit_stable_ops",
                ["csrc/ops.cpp", "csrc/rows.cpp", "csrc/row_maps.cpp", "csrc/row_in_place.cpp"],
                include_dirs=[str(HERE / "csrc"), tierkit_core.get_include()],
                extra_compile_args=compile_args,
                py_limited_api=True,
            )
        )
    ],
    cmdclass={
        # rows.cpp (the row reductions' kernels) takes longer than the rest together: 53 s of a 63-s build,
        # from 11 s in, in name order (AMD EPYC Zen 4, two cores).
        "build_ext": longest_first("rows.cpp"),
        "build_py": BuildPyWithInfo,
    },
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
