"""Build helpers every torch tier uses (torch-cpu, torch-cuda, torch-stable):
the facts they record in ``_build_info.py`` (read by ``tierkit doctor``: which
torch, C++ ABI, CUDA), the torch requirement their wheels declare, the check
that refuses to load a library under another torch, and how their operator
library is kept free of Python.

They live in tierkit-torch-common, which every torch tier requires to build
and none of their compiled libraries depends on: no torch tier imports
another's Python. Nothing here imports torch; callers pass the module in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def debug_info_flags() -> list[str]:
    """``-g0`` unless TIERKIT_DEBUG_INFO=1. setuptools compiles extensions with
    Python's own CFLAGS, which carry ``-g``: with torch's headers that doubled
    a file's compile time here (torch-cpu's autograd.cpp 55 s -> 25 s,
    cpu_kernels.cpp 38 s -> 26 s) and filled the library with debug info of
    torch's headers (cpu_kernels.o 9.5 MB -> 0.55 MB). Sanitizer builds add
    ``-g1`` (line tables) after it, for their reports' file:line."""
    return [] if os.environ.get("TIERKIT_DEBUG_INFO") == "1" else ["-g0"]


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


def release(version: str) -> str:
    """'2.14.1+cu130' -> '2.14.1': the release without the local build label."""
    return version.split("+", 1)[0]


def torch_requirement(torch) -> str:
    """The runtime requirement on torch of a library compiled against `torch`.

    Exact release (==X.Y.Z), not ~=X.Y: libtorch's C++ ABI is not stable
    across releases, patch releases included, so a library only loads on the
    torch it was compiled against. No local label: the CPU (+cpu) and CUDA
    (+cu130) builds of one release share the C++ ABI of the symbols we use
    (torch-cuda additionally refuses a CPU-only build when imported)."""
    return f"torch=={release(torch.__version__)}"


def tier_version(tier_dir: Path) -> str:
    """The tier's version: its VERSION file (a link to the repository's one)."""
    return (tier_dir / "VERSION").read_text().strip()


def require_built_torch(package: str, built: str, running: str, tier_dir: str) -> None:
    """Refuse, in a sentence, to load a library under another torch than the one
    it was compiled against (before the loader's `undefined symbol`)."""
    if release(built) != release(running):
        raise ImportError(
            f"{package} was built against torch {release(built)} but torch {release(running)} is "
            f"installed; its compiled library only loads on the torch it was built with. Either "
            f"`pip install torch=={release(built)}`, or rebuild {package} against this torch: "
            f"`pip install --no-build-isolation --force-reinstall {tier_dir}`."
        )


def python_free(ext):
    """torch's CppExtension/CUDAExtension link libtorch_python (torch's Python
    bindings) by default; an operator library needs only libtorch, and without
    it a C++ program (an AOTInductor runner) can load the library."""
    ext.libraries = [lib for lib in ext.libraries if lib != "torch_python"]
    return ext


def longest_first(*names: str, build_ext_class=None):
    """The torch tiers' build_ext (torch's BuildExtension with ninja and a
    plain library name, or `build_ext_class`) compiling the sources called
    `names` first. setuptools sorts an extension's sources
    by name and torch writes them to build.ninja in that order, which is the
    order ninja starts them in: a tier's one long compile (its row kernels at
    each SIMD level) came last and ran alone while the other core idled.
    torch-cpu's ASan build in CI's run took 246 s, row_ops.cpp 173 s of it
    from 73 s in; a release build 146 s, row_ops.cpp 93 s from 53 s in (AMD
    EPYC Zen 4, two cores). The objects come back in the sorted order, so the
    link line is unchanged."""

    if build_ext_class is None:
        from torch.utils.cpp_extension import BuildExtension

        # no_python_abi_suffix: a plain lib<name>.so, not a Python module's name.
        build_ext_class = BuildExtension.with_options(use_ninja=True, no_python_abi_suffix=True)

    class LongestFirst(build_ext_class):
        def build_extension(self, ext):
            compile_all = self.compiler.compile

            def compile_longest_first(sources, *args, **kwargs):
                ordered = sorted(sources, key=lambda s: Path(s).name not in names)
                by_source = dict(zip(ordered, compile_all(ordered, *args, **kwargs)))
                return [by_source[s] for s in sources]

            self.compiler.compile = compile_longest_first
            try:
                super().build_extension(ext)
            finally:
                self.compiler.compile = compile_all

    return LongestFirst


def python_dependencies(library: str | Path) -> list[str]:
    """What ties a built library to Python: the Py*/_Py* symbols it imports
    and the DT_NEEDED entries naming a Python library (libpython,
    libtorch_python). Empty for an operator library built with python_free;
    the torch tiers' tests assert that on what they built."""
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    needed = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    found = sorted({s.split("@")[0] for s in undefined if s.startswith(("Py", "_Py"))})
    found += [
        line.split()[-1] for line in needed.splitlines() if "NEEDED" in line and "python" in line.lower()
    ]
    return found


def remove_stale_python_modules(tier_dir: Path, package: str) -> None:
    """Earlier releases built a Python module `_C` beside the library; an
    in-place rebuild must not ship that stale file in the new wheel."""
    for stale in tier_dir.glob(f"build/**/{package}/_C*.so"):
        stale.unlink()
