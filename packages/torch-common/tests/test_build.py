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
