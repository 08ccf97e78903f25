"""Which compiled library provides the tierkit ops in this process.

Exactly one may: the ahead-of-time operator library
(``libtierkit_torch_ops.so`` in this package, the default) or a just-in-time
build (:mod:`tierkit_torch.jit`). Either is a plain shared library with no
Python in it, loaded with ``torch.ops.load_library``. Both define
``TORCH_LIBRARY(tierkit)``, and the dispatcher refuses a namespace defined
twice, so the choice is made once, before anything is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

JIT_ENV = "TIERKIT_TORCH_JIT"
_loaded: str | None = None


def jit_requested() -> bool:
    return os.environ.get(JIT_ENV, "") == "1"


def loaded() -> str | None:
    """ "aot", "jit" or None."""
    return _loaded


def mark_loaded(mode: str) -> None:
    global _loaded
    if _loaded is not None and _loaded != mode:
        raise RuntimeError(
            f"tierkit_torch: the {_loaded} library is already loaded in this process; "
            f"the tierkit ops cannot also come from a {mode} build. Set {JIT_ENV}=1 before "
            "importing tierkit_torch to use the JIT build."
        )
    _loaded = mode


AOT_LIBRARY = "libtierkit_torch_ops.so"
_path: str | None = None


def aot_library_path() -> str:
    return str(Path(__file__).resolve().parent / AOT_LIBRARY)


def library_path() -> str | None:
    """The operator library loaded in this process (None before one is)."""
    return _path


def set_loaded_path(path: str) -> None:
    global _path
    _path = path


def _require_built_torch(running: str) -> None:
    try:
        from ._build_info import TORCH_VERSION
    except ImportError:  # a source tree that was never built: the load below says so
        return
    from tierkit_torch_common.build import require_built_torch

    require_built_torch("tierkit_torch", TORCH_VERSION, running, "packages/torch-cpu")


def load_aot() -> None:
    if _loaded == "aot":
        return
    import torch

    path = aot_library_path()
    if not Path(path).is_file():
        raise ImportError(
            f"tierkit_torch: its operator library {path} is missing: the package was not built "
            "(install it with pip install --no-build-isolation packages/torch-cpu)"
        )
    _require_built_torch(torch.__version__)
    mark_loaded("aot")
    torch.ops.load_library(path)  # static initialisers register the ops
    set_loaded_path(path)
