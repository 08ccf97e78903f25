"""numpy's rules for the ops' operands, where the compiled fast path stops.

The compiled ops take operands of one shape and one dtype that core reads in
place. Everything else numpy's ufuncs accept comes here (the ops call
:func:`call`): broadcasting of every array operand, type promotion as
``np.result_type`` (Python scalars weak, numpy scalars and arrays strong),
Python and numpy scalars as operands, dtypes or byte orders core does not
read, masked arrays (the result keeps the operands' masks, OR-ed as numpy
does) and an ``out`` of another dtype (computed in the result dtype, then
cast into ``out`` under numpy's ``same_kind`` rule). The operands are
brought to the broadcast shape and the result dtype (stride-0 views, copies
only for a dtype change), then the op runs again on the fast path, which
allocates the result in numpy's K order.

torch tensors follow torch's rules here (``torch.result_type``, ``expand``):
torch in, torch out.
"""

from __future__ import annotations

import sys
from typing import Any

from . import _bridge

ACCEPTED = ("float32", "float64", "float16", "bfloat16")
_ACCEPTED_TEXT = "float32, float64, float16 or bfloat16"
# Each op's array parameters, in order (the op table's tensors); the rest of
# its arguments are scalars.
_ARRAYS = {name: tensors for name, (tensors, _) in _bridge._op_parameters().items()}
_SCALARS = (bool, int, float, complex)


def call(op: str, args: tuple[Any, ...], out: Any) -> Any:
    names = _ARRAYS[op]
    operands, scalars = list(args[: len(names)]), args[len(names) :]
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(x, torch.Tensor) for x in [*operands, out]):
        return _torch_call(torch, op, names, operands, scalars, out)
    return _numpy_call(op, names, operands, scalars, out)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _broadcast(names: tuple[str, ...], shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """numpy's broadcast shape; the error names the operand that does not fit."""
    result: tuple[int, ...] = ()
    for i, (name, shape) in enumerate(zip(names, shapes)):
        rank = max(len(result), len(shape))
        a = (1,) * (rank - len(result)) + result
        b = (1,) * (rank - len(shape)) + shape
        if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
            raise ValueError(
                f"{name}: expected a shape that broadcasts with {' and '.join(names[:i])}'s "
                f"{_shape_text(result)}, got {_shape_text(shape)}"
            )
        result = tuple(y if x == 1 else x for x, y in zip(a, b))
    return result


def _check_out_shape(out_shape: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """numpy's rule: the operands broadcast to ``out``'s shape, never ``out`` to theirs."""
    try:
        fits = _broadcast(("operands", "out"), [shape, out_shape]) == out_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"out: expected shape {_shape_text(shape)} (the operands' broadcast shape) or one it "
            f"broadcasts to, got {_shape_text(out_shape)}"
        )


def _refuse_dtype(names: tuple[str, ...], dtypes: list[Any], result: Any) -> None:
    """The result dtype is not one the kernels compute in: name the operand that made it so."""
    for name, dt in zip(names, dtypes):
        if dt is not None and str(dt) not in ACCEPTED:
            culprit, got = name, dt
            break
    else:  # only scalars (a complex or an int one) brought it
        culprit, got = "/".join(names), result
    raise TypeError(
        f"{culprit}: expected dtype {_ACCEPTED_TEXT}, got {got}"
        + ("" if str(got) == str(result) else f" (the operands promote to {result})")
    )


def _numpy_call(
    op: str, names: tuple[str, ...], operands: list[Any], scalars: tuple[Any, ...], out: Any
) -> Any:
    import numpy as np

    ma = sys.modules.get("numpy.ma")
    masks: list[Any] = []
    values: list[Any] = []
    dtypes: list[Any] = []  # None for a Python scalar (weak: it takes the arrays' dtype)
    for name, x in zip(names, operands):
        if ma is not None and isinstance(x, ma.MaskedArray):
            masks.append(ma.getmaskarray(x))
            x = x.data
        elif isinstance(x, _SCALARS):
            values.append(x)
            dtypes.append(None)
            continue
        elif not isinstance(x, (np.ndarray, np.generic)):
            x = _as_numpy(name, x)
        values.append(x)
        dtypes.append(x.dtype)
    if out is not None:
        if ma is not None and isinstance(out, ma.MaskedArray):
            raise TypeError(
                "out: expected an array without a mask, got a numpy.ma.MaskedArray; the bridge does not "
                "write masks: leave out=None (the result keeps the mask) or pass out.data"
            )
        if not isinstance(out, np.ndarray):
            out = _as_numpy("out", out)
        if not out.flags.writeable:
            raise ValueError(f"out: expected a writable array, got a read-only {type(out).__name__}")

    result = np.result_type(*values).newbyteorder("=")
    if result.name not in ACCEPTED:
        _refuse_dtype(names, dtypes, result)
    shape = _broadcast(names, [np.shape(v) for v in values])
    if out is not None:
        _check_out_shape(out.shape, shape)
        shape = out.shape
    # Operands in the result dtype (a copy only where it changes; order="K"
    # keeps the layout the output's K order is taken from), then broadcast
    # as stride-0 views.
    ready = [np.broadcast_to(as_dtype(np.asarray(v), result), shape) for v in values]
    fn = getattr(_bridge, f"_{op}_exact")
    if out is not None and out.dtype == result:
        return fn(*ready, *scalars, out=out)
    if out is not None:
        if not np.can_cast(result, out.dtype, casting="same_kind"):
            raise TypeError(
                f"out: expected a dtype {result} casts to under numpy's same_kind rule, got {out.dtype}"
            )
        return write_back(out, fn(*ready, *scalars))
    res = fn(*ready, *scalars)
    if masks:
        assert ma is not None  # a mask was found, so numpy.ma is loaded
        mask = masks[0] if len(masks) == 1 else np.logical_or(*masks)
        return ma.MaskedArray(res, mask=np.broadcast_to(mask, shape).copy())
    if res.ndim == 0:
        return res[()]  # numpy's ufuncs give a scalar for a 0-d result
    if isinstance(operands[0], _bridge.Buffer):
        return _bridge.as_buffer(res)
    return res


def as_dtype(v: Any, dtype: Any) -> Any:
    """The numpy array ``v`` in ``dtype`` (native byte order): ``v`` itself, or a copy
    in order K (the layout the output's K order is taken from). The one
    conversion of operands the kernels cannot read in place: here for another
    dtype or byte order, and through :func:`native` for the row functions."""
    return v if v.dtype == dtype else v.astype(dtype, order="K")


def native(v: Any) -> Any:
    """A numpy array in native byte order, as numpy's ufuncs read ``'>f4'``:
    ``v`` itself, or its values copied (:func:`as_dtype`). The row functions
    call this for every array argument in another byte order, and for such
    an ``out`` (the result is computed into the copy, then :func:`write_back`)."""
    return as_dtype(v, v.dtype.newbyteorder("="))


def write_back(out: Any, result: Any) -> Any:
    """``result`` into an ``out`` the kernels cannot write in place (another
    dtype, another byte order), as numpy writes a ufunc's ``out``: cast under
    ``same_kind``, byte-swapped where ``out`` is; returns ``out``."""
    import numpy as np

    np.copyto(out, result, casting="same_kind")
    return out


def _as_numpy(name: str, x: Any) -> Any:
    """Any other array the bridge reads (a Buffer, a memoryview...) as a numpy view, zero-copy."""
    import numpy as np

    try:
        _bridge.as_buffer(x)  # the bridge's own checks and messages first
        return np.asarray(x)
    except (TypeError, ValueError):
        raise
    except Exception as e:  # pragma: no cover - a producer numpy cannot view
        raise TypeError(f"{name}: expected an array numpy can view, got {type(x).__name__}: {e}") from e


def _torch_call(
    torch: Any, op: str, names: tuple[str, ...], operands: list[Any], scalars: tuple[Any, ...], out: Any
) -> Any:
    for name, x in zip(names, operands):
        if not isinstance(x, (torch.Tensor, *_SCALARS)):
            raise TypeError(
                f"{name}: expected a torch tensor or a Python number beside torch tensors, got {type(x).__name__}"
            )
    dtypes = [str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else None for x in operands]
    try:
        result = operands[0] if len(operands) == 1 else torch.result_type(operands[0], operands[1])
    except RuntimeError:
        # torch promotes no float8 with another dtype (found by fuzzing: its
        # RuntimeError named neither argument): the operand the kernels refuse anyway.
        _refuse_dtype(names, dtypes, "no dtype (torch promotes none for them)")
        raise
    if isinstance(result, torch.Tensor):
        result = result.dtype
    if str(result).removeprefix("torch.") not in ACCEPTED:
        _refuse_dtype(names, dtypes, str(result).removeprefix("torch."))
    shape = _broadcast(names, [tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in operands])
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out: expected a torch tensor beside torch tensors, got {type(out).__name__}")
        _check_out_shape(tuple(out.shape), shape)
        shape = tuple(out.shape)
    ready = [
        (x.to(result) if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=result)).expand(shape)
        for x in operands
    ]
    fn = getattr(_bridge, f"_{op}_exact")
    if out is None or out.dtype == result:
        return fn(*ready, *scalars, out=out)
    if not torch.can_cast(result, out.dtype):
        raise TypeError(f"out: expected a dtype {result} casts to under torch's rules, got {out.dtype}")
    # Into out through the bridge, so out's own checks (grad, inference,
    # math bits) and version bump apply: x + (-0.0) is x exactly, signed zeros too.
    return _bridge._scale_shift_exact(fn(*ready, *scalars).to(out.dtype), 1.0, -0.0, out=out)
