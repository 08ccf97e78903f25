"""Build of tierkit-torch: one shared library, tierkit_torch/libtierkit_torch_ops.so,
holding the operator schemas and CPU kernels. It has no Python in it (no
Python.h, no libtorch_python): the Python package loads it with
torch.ops.load_library, and a C++ program (an AOTInductor runner) can load
the same file. Metadata is in pyproject.toml.

Build against the torch you will run with:
    pip install --no-build-isolation packages/torch-cpu
Environment knobs: MAX_JOBS (parallel compile jobs), TIERKIT_SANITIZE
(e.g. "address,undefined": an instrumented build with the canary op).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import tierkit_core
import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from tierkit_torch_common.build import (
    debug_info_flags,
    longest_first,
    python_free,
    remove_stale_python_modules,
    tier_version,
    torch_facts,
    torch_requirement,
)
from torch.utils.cpp_extension import CppExtension

HERE = Path(__file__).resolve().parent

# The local kernels repository (tierkit_torch.hub's repo/build/<variant>/, pyproject.toml's
# package-data) is data that `kernels` imports from its own path at run time, not a package
# of ours (its variant folders are named torch-cpu, torch-cuda: no Python name). setuptools
# took its .py files for a package missing from `packages` and printed 40 lines each build.
warnings.filterwarnings("ignore", message=r"(?s).*'tierkit_torch\.hub\.repo\b")
SANITIZE = os.environ.get("TIERKIT_SANITIZE", "")

# -fopenmp: at::parallel_for is an inline template whose OpenMP backend is a
# `#pragma omp parallel` compiled into *this* library; without the flag it
# silently runs on one thread (measured: add_out at 1.6e7 took 13.5 ms with
# 1 or 2 torch threads alike). libgomp.so.1 resolves to the copy torch loads.
compile_args = [
    "-O3",
    "-fopenmp",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    *tierkit_core.cxx_flags(),
    *debug_info_flags(),
]
link_args: list[str] = ["-fopenmp"]
macros: list[tuple[str, str | None]] = []
if SANITIZE:
    # vptr checks need RTTI from torch's uninstrumented libraries: false alarms.
    flags = [f"-fsanitize={SANITIZE}", "-fno-sanitize=vptr", "-fno-omit-frame-pointer", "-g1"]
    if "undefined" in SANITIZE and "address" in SANITIZE:
        # UBSan's per-access checks, as in core's ASan CTest build: ASan
        # covers the accesses they guard (torch's tensors are aligned), and
        # they cost row_ops.cpp's compile 155 CPU-s against 91 without them
        # (Zen 4). The sanitized bridge keeps all of UBSan over the same
        # kernels, beside numpy's unaligned buffers.
        flags.append("-fno-sanitize=alignment,null,object-size,pointer-overflow")
    # -O1, ASan's recommendation: instrumented -O3 took 3 min 10 s to build
    # here, -O1 2 min 2 s, and the tests run as fast. -g1 (line tables): the
    # reports still name file:line, and autograd.cpp compiles in 46 s, not 80.
    compile_args = [arg for arg in compile_args if arg != "-O3"] + ["-O1", *flags]
    link_args += flags
    macros.append(("TIERKIT_SANITIZE_BUILD", None))


VERSION = tier_version(HERE)


def build_info() -> str:
    return torch_facts(torch, SANITIZE=SANITIZE, BUILD_MODE="aot")


class BuildPyWithSources(build_py):
    """Ship the C++ sources and headers inside the package (JIT builds
    compile them; torch-cuda includes the headers) and record build facts."""

    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "tierkit_torch"
        for name in ("csrc", "include"):
            shutil.copytree(HERE / name, pkg / name, dirs_exist_ok=True)
        (pkg / "_build_info.py").write_text(build_info())


remove_stale_python_modules(HERE, "tierkit_torch")

setup(
    # The torch release compiled against, exactly; core for JIT builds' headers.
    install_requires=[
        torch_requirement(torch),
        f"tierkit-core=={VERSION}",
        f"tierkit-torch-common=={VERSION}",
    ],
    ext_modules=[
        python_free(
            CppExtension(
                "tierkit_torch.libtierkit_torch_ops",
                sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cpp")),
                include_dirs=[str(HERE / "include"), tierkit_core.get_include()],
                define_macros=macros,
                extra_compile_args=compile_args,
                extra_link_args=link_args,
            )
        )
    ],
    cmdclass={
        # A plain libtierkit_torch_ops.so, row_ops.cpp (every row reduction's kernels, as long as the
        # rest together) compiled first.
        "build_ext": longest_first("row_ops.cpp"),
        "build_py": BuildPyWithSources,
    },
    options={
        # The wheel holds no Python-version-specific binary: one wheel serves CPython >= 3.10.
        "bdist_wheel": {"py_limited_api": "cp310"},
        # Instrumented objects must never be mixed with normal ones.
        "build": {"build_base": "build/asan" if SANITIZE else "build"},
    },
)
