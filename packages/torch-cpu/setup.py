"""Build of tierkit-torch: one C++ extension, tierkit_torch._C, holding the
operator schemas and CPU kernels. Metadata is in pyproject.toml.

Build against the torch you will run with:
    pip install --no-build-isolation packages/torch-cpu
Environment knobs: MAX_JOBS (parallel compile jobs), TIERKIT_SANITIZE
(e.g. "address,undefined": an instrumented build with the canary op).
"""

from __future__ import annotations

import os
import runpy
import shutil
from pathlib import Path

import tierkit_core
import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).resolve().parent
SANITIZE = os.environ.get("TIERKIT_SANITIZE", "")

# -fopenmp: at::parallel_for is an inline template whose OpenMP backend is a
# `#pragma omp parallel` compiled into *this* library; without the flag it
# silently runs on one thread (measured: add_out at 1.6e7 took 13.5 ms with
# 1 or 2 torch threads alike). libgomp.so.1 resolves to the copy torch loads.
compile_args = ["-O3", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter"]
link_args: list[str] = ["-fopenmp"]
macros: list[tuple[str, str | None]] = []  # py_limited_api=True makes torch define Py_LIMITED_API (3.10)
if SANITIZE:
    # vptr checks need RTTI from torch's uninstrumented libraries: false alarms.
    flags = [f"-fsanitize={SANITIZE}", "-fno-sanitize=vptr", "-fno-omit-frame-pointer", "-g"]
    compile_args += flags
    link_args += flags
    macros.append(("TIERKIT_SANITIZE_BUILD", None))


def build_info() -> str:
    facts = runpy.run_path(str(HERE / "src" / "tierkit_torch" / "build_facts.py"))
    return facts["torch_facts"](torch, SANITIZE=SANITIZE, BUILD_MODE="aot")


class BuildPyWithSources(build_py):
    """Ship the C++ sources and headers inside the package (JIT builds
    compile them; torch-cuda includes the headers) and record build facts."""

    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "tierkit_torch"
        for name in ("csrc", "include"):
            shutil.copytree(HERE / name, pkg / name, dirs_exist_ok=True)
        (pkg / "_build_info.py").write_text(build_info())


setup(
    ext_modules=[
        CppExtension(
            "tierkit_torch._C",
            sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cpp")),
            include_dirs=[str(HERE / "include"), tierkit_core.get_include()],
            define_macros=macros,
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "build_py": BuildPyWithSources},
    options={
        "bdist_wheel": {"py_limited_api": "cp310"},
        # Instrumented objects must never be mixed with normal ones.
        "build": {"build_base": "build/asan" if SANITIZE else "build"},
    },
)
