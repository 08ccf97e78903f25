"""The row reductions for any array the bridge reads: ``rms_norm``.

The arguments are read by the bridge's own import path, in C++ (``_bridge._rms_norm``),
as the pointwise ops' are: numpy arrays, torch tensors (bfloat16 included),
Buffers, anything with the buffer protocol or ``__dlpack__``; the result is
presented like ``x`` (numpy in, numpy out; torch in, torch out). Here: the
signature, eps's type, and masked arrays, which are refused (below).
"""

from __future__ import annotations

import sys
from typing import Any

from . import _bridge


def _refuse_masked(value: Any, name: str) -> None:
    # A mask says which elements exist; the norm would be taken over the
    # masked ones too (numpy's ufuncs keep masks elementwise, but a row's
    # mean of squares has no masked meaning tierkit could honour exactly as
    # numpy.ma would), so it is refused rather than silently dropped.
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(value, ma.MaskedArray):
        raise TypeError(
            f"rms_norm: {name}: expected an array without a mask, got a numpy.ma.MaskedArray (rms_norm "
            f"would normalise over the masked elements too); pass {name}.filled(value) or {name}.data"
        )


def rms_norm(x: Any, weight: Any = None, eps: float | None = None, *, out: Any = None) -> Any:
    """``x / sqrt(mean(x**2, axis=-1) + eps) * weight`` over the last axis, as
    torch's ``F.rms_norm(x, (x.shape[-1],), weight, eps)``.

    ``eps`` defaults to torch's: float32's machine epsilon (float64's for
    float64 input). 16-bit inputs accumulate in float32; every row is reduced
    in one fixed order, so the result does not depend on the thread count.
    ``weight``: shape ``(x.shape[-1],)``, any float dtype (a float32 weight
    with float16 ``x`` is computed in float32, as torch's: the result keeps
    x's dtype); it is read as it was at the call, even where it lies in ``out``. Returns a new array presented
    like ``x``, or writes into ``out`` (x's shape and dtype, any layout) and
    returns it. Masked arrays are refused.
    """
    # Python sequences are arrays to numpy (np.asarray), as before the import path.
    x, weight = _from_sequence(x), _from_sequence(weight)
    _refuse_masked(x, "x")
    _refuse_masked(weight, "weight")
    _refuse_masked(out, "out")
    if eps is not None and (isinstance(eps, bool) or not _is_real(eps)):
        raise TypeError(f"rms_norm: eps: expected a real number, got {type(eps).__name__}")
    return _bridge._rms_norm(x, weight, None if eps is None else float(eps), out)


def _from_sequence(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        import numpy as np

        return np.asarray(value)
    return value


def _is_real(value: Any) -> bool:
    if isinstance(value, (int, float)):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.floating, np.integer))
