"""Build helpers both torch tiers' setup.py use: the facts they record in
``_build_info.py`` (read by ``tierkit doctor``: which torch, C++ ABI, CUDA),
and how their operator library is kept free of Python. torch-cpu's setup.py
loads this file by path (the package is not installed while it builds);
torch-cuda's imports it from the installed tierkit_torch."""

from __future__ import annotations

from pathlib import Path


def torch_facts(torch, **extra: object) -> str:
    """The text of a ``_build_info.py``: torch's facts, then ``extra``."""
    lines = [
        '"""Recorded when this package was built (read by `tierkit doctor`)."""',
        "",
        f"TORCH_VERSION = {torch.__version__!r}",
        f"CXX11_ABI = {bool(torch._C._GLIBCXX_USE_CXX11_ABI)!r}",
        f"CUDA_VERSION = {torch.version.cuda!r}",
    ]
    lines += [f"{key} = {value!r}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def python_free(ext):
    """torch's CppExtension/CUDAExtension link libtorch_python (torch's Python
    bindings) by default; an operator library needs only libtorch, and without
    it a C++ program (an AOTInductor runner) can load the library."""
    ext.libraries = [lib for lib in ext.libraries if lib != "torch_python"]
    return ext


def remove_stale_python_modules(tier_dir: Path, package: str) -> None:
    """Earlier releases built a Python module `_C` beside the library; an
    in-place rebuild must not ship that stale file in the new wheel."""
    for stale in tier_dir.glob(f"build/**/{package}/_C*.so"):
        stale.unlink()
