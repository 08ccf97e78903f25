"""Build of tierkit-cuda: one shared library, tierkit_cuda/libtierkit_cuda_ops.so,
holding CUDA kernels for the tierkit ops, with no Python in it (a C++
program can load it beside tierkit-torch's). Metadata is in pyproject.toml.

Needs nvcc and a CUDA build of torch whose CUDA major version matches it;
no GPU is needed to build. Build against the torch you run with:
    pip install --no-build-isolation packages/torch-cuda
Knobs: CUDA_HOME, TORCH_CUDA_ARCH_LIST (defaults in
src/tierkit_cuda/cuda_defaults.py), MAX_JOBS.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def fail(message: str) -> None:
    sys.exit(f"\ntierkit-cuda: {message}\n")


# torch.utils.cpp_extension reads CUDA_HOME when imported: settle it first.
# (A wrapper `nvcc` in /usr/local/bin would otherwise make torch guess
# CUDA_HOME=/usr/local, where there is no lib64/libcudart.)
defaults = runpy.run_path(str(HERE / "src" / "tierkit_cuda" / "cuda_defaults.py"))
if defaults["cuda_home"]():
    os.environ["CUDA_HOME"] = defaults["cuda_home"]()
os.environ["TORCH_CUDA_ARCH_LIST"] = defaults["arch_list"]()

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402

if torch.version.cuda is None:
    fail(
        f"the installed torch {torch.__version__} is a CPU-only build; this tier needs a CUDA build "
        "(here: pip install torch==2.14.1, the CUDA 13.0 build). Build with --no-build-isolation so "
        "the torch you build against is the torch you run."
    )

from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension  # noqa: E402

nvcc = Path(CUDA_HOME or "", "bin", "nvcc")
if not CUDA_HOME or not nvcc.exists():
    fail(
        f"nvcc not found (CUDA_HOME={CUDA_HOME!r}). Install the CUDA toolkit {torch.version.cuda} "
        "and set CUDA_HOME to its root (the directory holding bin/nvcc)."
    )

import tierkit_core  # noqa: E402  (core's headers: dtypes, checks)
import tierkit_torch  # noqa: E402  (for its shared checks header)
from tierkit_torch_common import build as tier_build  # noqa: E402  (torch-cpu's setup.py shares it)

VERSION = tier_build.tier_version(HERE)


def build_info() -> str:
    return tier_build.torch_facts(
        torch, CUDA_HOME=CUDA_HOME, TORCH_CUDA_ARCH_LIST=os.environ["TORCH_CUDA_ARCH_LIST"]
    )


class BuildPyWithInfo(build_py):
    def run(self):
        super().run()
        (Path(self.build_lib) / "tierkit_cuda" / "_build_info.py").write_text(build_info())


tier_build.remove_stale_python_modules(HERE, "tierkit_cuda")

setup(
    # The torch release compiled against, exactly; the schemas' tier of the same version.
    install_requires=[
        tier_build.torch_requirement(torch),
        f"tierkit-torch=={VERSION}",
        f"tierkit-core=={VERSION}",
        f"tierkit-torch-common=={VERSION}",
    ],
    ext_modules=[
        tier_build.python_free(
            CUDAExtension(
                "tierkit_cuda.libtierkit_cuda_ops",
                [
                    "csrc/ops.cpp",
                    "csrc/timing.cpp",
                    "csrc/kernels.cu",
                    "csrc/row_ops.cpp",
                    "csrc/row_kernels.cu",
                    "csrc/map_ops.cpp",
                    "csrc/map_kernels.cu",
                    "csrc/in_place_ops.cpp",
                    "csrc/in_place_kernels.cu",
                ],
                include_dirs=[str(HERE / "csrc"), tierkit_torch.get_include(), tierkit_core.get_include()],
                # No FMA contraction anywhere: results must be bit-identical to
                # eager torch and to the CPU tiers (tests-cuda checks the SASS).
                extra_compile_args={
                    "cxx": ["-O3", "-Wall", *tierkit_core.cxx_flags(), *tier_build.debug_info_flags()],
                    "nvcc": ["-O3", "--fmad=false"],
                },
            )
        )
    ],
    cmdclass={
        "build_ext": BuildExtension.with_options(use_ninja=True, no_python_abi_suffix=True),
        "build_py": BuildPyWithInfo,
    },
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
