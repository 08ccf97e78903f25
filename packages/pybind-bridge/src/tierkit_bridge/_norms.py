"""The row reductions for numpy arrays: ``rms_norm``.

numpy's side of the work happens here, in Python (the call is one pass over
a large array, so a Python frame is noise): the arguments are checked and
named in errors, made C-contiguous where they are not (a copy only then),
``out`` allocated or checked; core's kernel (``_bridge._rms_norm``) then
normalises every row of the last dimension without the GIL.
"""

from __future__ import annotations

from typing import Any

from . import _bridge

_ACCEPTED = ("float32", "float64", "float16", "bfloat16")
_ACCEPTED_TEXT = "float32, float64, float16 or bfloat16"


def rms_norm(x: Any, weight: Any = None, eps: float | None = None, *, out: Any = None) -> Any:
    """``x / sqrt(mean(x**2, axis=-1) + eps) * weight`` over the last axis, as
    torch's ``F.rms_norm(x, (x.shape[-1],), weight, eps)``.

    ``eps`` defaults to torch's: float32's machine epsilon (float64's for
    float64 input). 16-bit inputs accumulate in float32; every row is reduced
    in one fixed order, so the result does not depend on the thread count.
    ``weight``: x's dtype, shape ``(x.shape[-1],)``. Returns a new array, or
    writes into ``out`` (x's shape and dtype) and returns it.
    """
    import numpy as np

    xa = np.asarray(x)
    if xa.dtype.name not in _ACCEPTED:
        raise TypeError(f"rms_norm: x: expected dtype {_ACCEPTED_TEXT}, got {xa.dtype}")
    if xa.ndim == 0:
        raise ValueError(
            "rms_norm: x: expected an array with at least one dimension (the last is normalised), got a 0-d one"
        )
    d = xa.shape[-1]
    wa = None
    if weight is not None:
        wa = np.asarray(weight)
        if wa.dtype != xa.dtype:
            raise TypeError(f"rms_norm: weight: expected dtype {xa.dtype} (same as x), got {wa.dtype}")
        if wa.shape != (d,):
            raise ValueError(f"rms_norm: weight: expected shape ({d},) (x's last dimension), got {wa.shape}")
        wa = np.ascontiguousarray(wa)
    if eps is None:
        eps = float(np.finfo(np.float64 if xa.dtype == np.float64 else np.float32).eps)
    elif isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)):
        raise TypeError(f"rms_norm: eps: expected a real number, got {type(eps).__name__}")
    xc = np.ascontiguousarray(xa)
    if xc.size == 0:  # no rows, or rows of no elements: nothing to normalise
        return np.empty_like(xc) if out is None else out
    if out is None:
        result = np.empty_like(xc)
        _bridge._rms_norm(xc, wa, float(eps), result)
        return result
    if not isinstance(out, np.ndarray):
        raise TypeError(f"rms_norm: out: expected a numpy array, got {type(out).__name__}")
    if out.shape != xa.shape or out.dtype != xa.dtype:
        raise ValueError(
            f"rms_norm: out: expected shape {xa.shape} and dtype {xa.dtype} (x's), got {out.shape} and {out.dtype}"
        )
    if not out.flags.writeable:
        raise ValueError("rms_norm: out: expected a writable array, got a read-only one")
    if (out.flags.c_contiguous and not np.shares_memory(out, xc)) or out is xc:
        _bridge._rms_norm(xc, wa, float(eps), out)
    else:  # strided, or partly over x: computed apart, then copied in
        tmp = np.empty_like(xc)
        _bridge._rms_norm(xc, wa, float(eps), tmp)
        np.copyto(out, tmp)
    return out
