"""tierkit_torch_common.build: what ties a library to Python (the torch
tiers' libraries must have nothing of it)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("readelf") is None, reason="needs binutils")
def test_python_dependencies_finds_what_ties_a_library_to_python():
    import _ctypes

    from tierkit_torch_common.build import python_dependencies

    # A CPython extension module imports the C API; the C library does not.
    found = python_dependencies(_ctypes.__file__)
    assert "PyType_Ready" in found or "PyModule_Create2" in found or "PyModuleDef_Init" in found, found
    assert all(name.startswith(("Py", "_Py")) or "python" in name.lower() for name in found)
    libc = subprocess.run(["ldd", sys.executable], capture_output=True, text=True).stdout
    path = next(
        part
        for line in libc.splitlines()
        if "libc.so" in line
        for part in line.split()
        if part.startswith("/")
    )
    assert python_dependencies(path) == []


def test_longest_first_starts_the_named_sources_and_keeps_the_link_order():
    """setuptools sorts an extension's sources by name before compiling them;
    longest_first hands the compiler the named ones first (ninja starts them
    in that order) and gives the objects back in the sorted order."""
    from tierkit_torch_common.build import longest_first

    compiled = []

    class Compiler:
        def compile(self, sources, output_dir=None):
            compiled.append(list(sources))
            return [f"{output_dir}/{s.rsplit('/', 1)[-1].replace('.cpp', '.o')}" for s in sources]

    class SetuptoolsLike:  # build_ext.build_extension: sorted sources, then compile
        def __init__(self):
            self.compiler = Compiler()
            self.objects = None

        def build_extension(self, ext):
            self.objects = self.compiler.compile(sorted(ext), output_dir="obj")

    build = longest_first("row_ops.cpp", build_ext_class=SetuptoolsLike)()
    build.build_extension(["csrc/autograd.cpp", "csrc/row_ops.cpp", "csrc/canary.cpp"])
    assert compiled == [["csrc/row_ops.cpp", "csrc/autograd.cpp", "csrc/canary.cpp"]]
    assert build.objects == ["obj/autograd.o", "obj/canary.o", "obj/row_ops.o"]
    assert build.compiler.compile.__func__ is Compiler.compile  # put back afterwards
