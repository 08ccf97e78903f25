"""Which compiled library provides the tierkit ops in this process.

Exactly one may: the ahead-of-time extension (``tierkit_torch._C``, the
default) or a just-in-time build (:mod:`tierkit_torch.jit`). Both define
``TORCH_LIBRARY(tierkit)``, and the dispatcher refuses a namespace defined
twice, so the choice is made once, before anything is loaded.
"""

from __future__ import annotations

import os

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


def load_aot() -> None:
    if _loaded == "aot":
        return
    mark_loaded("aot")
    from . import _C  # type: ignore[attr-defined]  # noqa: F401  (static initialisers register the ops)
