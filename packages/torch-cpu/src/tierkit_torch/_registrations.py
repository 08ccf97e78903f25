"""Python-side kernels for the tierkit ops: the fake (meta) kernels.

Registered with ``torch.library.register_fake`` against the schemas the C++
library defined (the functional ops; the ``.out`` overloads decompose); the vmap
rules (_vmap.py) and DTensor sharding (_sharding.py) are registered from here too. A fake kernel says what a call returns (shape, dtype,
device, strides) without computing it, which is all ``torch.compile``,
``torch.export`` and meta tensors need. They apply the same checks as the C++
kernels, with ``torch._check`` so symbolic (dynamic) shapes become guards,
and a bad call fails the same way while tracing. Autograd is in C++
(csrc/autograd.cpp), where the no-grad path costs nothing measurable.
"""

from __future__ import annotations

import torch

from . import _sharding, _vmap

_registered = False
_accepted: tuple[torch.dtype, ...] = ()
_accepted_text = ""


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_first(op: str, t: torch.Tensor, name: str) -> None:
    torch._check(
        t.dtype in _accepted,
        lambda: f"{op}: {name}: expected dtype {_accepted_text}, got {_name(t.dtype)}",
    )


def _check_like(op: str, t: torch.Tensor, name: str, ref: torch.Tensor, ref_name: str) -> None:
    torch._check(
        t.device == ref.device,
        lambda: f"{op}: {name}: expected device {ref.device} (same as {ref_name}), got {t.device}",
    )
    torch._check(
        t.dtype == ref.dtype,
        lambda: f"{op}: {name}: expected dtype {_name(ref.dtype)} (same as {ref_name}), got {_name(t.dtype)}",
    )
    torch._check(
        t.shape == ref.shape,
        lambda: f"{op}: {name}: expected shape {list(ref.shape)} (same as {ref_name}), got {list(t.shape)}",
    )


def _dense(t: torch.Tensor) -> bool:
    # Named is_non_overlapping_and_dense before torch 2.9; the _or_false form
    # answers False rather than guarding when a dynamic shape leaves it open.
    import torch._prims_common as prims

    names = vars(prims)
    check = names.get("is_non_overlapping_and_dense_or_false") or names["is_non_overlapping_and_dense"]
    return check(t)


def _new_output(*inputs: torch.Tensor) -> torch.Tensor:
    # The C++ rule (tierkit_torch/checks.h, new_output): every input dense
    # and non-overlapping with the same strides -> those strides, as aten's
    # elementwise ops do; otherwise C-contiguous.
    first = inputs[0]
    if (
        first.dim() > 1
        and not first.is_contiguous()
        and all(_dense(t) and t.stride() == first.stride() for t in inputs)
    ):
        return torch.empty_strided(first.shape, first.stride(), dtype=first.dtype, device=first.device)
    return torch.empty(first.shape, dtype=first.dtype, device=first.device)


def _fake_binary(op: str):
    def fake(a, b, *scalars):
        _check_first(op, a, "a")
        _check_like(op, b, "b", a, "a")
        return _new_output(a, b)

    return fake


def _fake_scale_shift(x, alpha, beta):
    _check_first("tierkit::scale_shift", x, "x")
    return _new_output(x)


def _fake_add_out(a, b, out):
    op = "tierkit::add_out"
    _check_first(op, a, "a")
    _check_like(op, b, "b", a, "a")
    _check_like(op, out, "out", a, "a")


def register() -> None:
    """Register the fake kernels, vmap rules and DTensor sharding (once per process)."""
    global _registered, _accepted, _accepted_text
    if _registered:
        return
    # The accepted dtypes come from core's dtype table, through the C++ library.
    names = list(torch.ops.tierkit._accepted_dtypes())
    _accepted = tuple(getattr(torch, n) for n in names)
    _accepted_text = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    lib = torch.library
    for name in ("custom_add", "mul", "muladd"):
        lib.register_fake(f"tierkit::{name}", _fake_binary(f"tierkit::{name}"))
    lib.register_fake("tierkit::scale_shift", _fake_scale_shift)
    # The .out overloads need none: under fake tensors they decompose (their
    # CompositeImplicitAutograd kernel, csrc/composite.cpp) into the
    # functional op's fake kernel plus a copy.
    lib.register_fake("tierkit::add_out", _fake_add_out)
    _vmap.register()
    _sharding.install()
    _registered = True
