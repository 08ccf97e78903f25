"""tierkit's C++ core in Python: zero-copy buffers and elementwise kernels.

Inputs may be anything exposing the buffer protocol or ``__dlpack__`` (numpy
arrays, torch CPU tensors, memoryviews, :class:`Buffer`). They are read in
place, strides honoured; nothing is copied. The result follows the first
input's kind: numpy in, numpy out; torch in, torch out; otherwise a
:class:`Buffer`. With ``out=`` the result is written in place and ``out`` is
returned.
"""

from __future__ import annotations

import sys
from importlib import metadata as _metadata
from typing import Any

from . import _bridge
from ._bridge import (
    Buffer,
    allocator,
    as_buffer,
    get_num_threads,
    set_num_threads,
    vector_add_list,
)
from ._bridge import (
    _noop as _noop,  # explicit re-export: the bench measures a bare bound call
)

__all__ = [
    "Buffer",
    "add",
    "allocator",
    "as_buffer",
    "get_num_threads",
    "mul",
    "muladd",
    "scale_shift",
    "set_num_threads",
    "vector_add_list",
]
__version__ = _metadata.version("tierkit-bridge")  # one source: the repository's VERSION


def _like(result: Any, template: Any) -> Any:
    """Present a fresh result the way the caller's input was presented (zero-copy).

    For numpy inputs the extension allocates a numpy array itself (unless
    output caching is on); a Buffer goes to numpy or torch zero-copy, and is
    returned as is for anything else."""
    if type(result) is not Buffer:
        return result
    module = type(template).__module__
    if module == "numpy":
        import numpy as np

        return np.asarray(result)
    if module == "torch" and "torch" in sys.modules:
        return sys.modules["torch"].from_dlpack(result)
    return result


def add(a: Any, b: Any, *, out: Any = None) -> Any:
    """``a + b`` elementwise (same shape and dtype). Writes into ``out`` when given."""
    result = _bridge.add(a, b, out=out)
    return result if out is not None else _like(result, a)


def mul(a: Any, b: Any, *, out: Any = None) -> Any:
    """``a * b`` elementwise (same shape and dtype). Writes into ``out`` when given."""
    result = _bridge.mul(a, b, out=out)
    return result if out is not None else _like(result, a)


def scale_shift(x: Any, alpha: float, beta: float, *, out: Any = None) -> Any:
    """``alpha * x + beta`` elementwise. Writes into ``out`` when given."""
    result = _bridge.scale_shift(x, alpha, beta, out=out)
    return result if out is not None else _like(result, x)


def muladd(a: Any, b: Any, c: float, *, out: Any = None) -> Any:
    """``a * b + c`` elementwise, ``c`` a scalar. Writes into ``out`` when given."""
    result = _bridge.muladd(a, b, c, out=out)
    return result if out is not None else _like(result, a)
