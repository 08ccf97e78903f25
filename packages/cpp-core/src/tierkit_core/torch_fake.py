"""Fake (meta) kernels for the tierkit operator schemas, for any namespace
that defines them: ``tierkit`` (torch-cpu) and ``tierkit_stable`` (torch-stable).

A fake kernel says what a call returns (shape, dtype, device, strides)
without computing it, which is all ``torch.compile``, ``torch.export`` and
meta tensors need. They apply the same checks as the C++ kernels, with
``torch._check`` so symbolic (dynamic) shapes become guards, and a bad call
fails the same way while tracing.

Shared here, in core's Python package, because both torch tiers require core
and neither's compiled library depends on this file (see torch_build.py).
torch is imported by the caller; this module only receives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def register_fake_kernels(torch: Any, ns: str, accepted_dtypes: Sequence[str], lib: Any = None) -> None:
    """Register fake kernels for ns::{custom_add, mul, muladd, scale_shift}.

    `accepted_dtypes` are torch dtype names ("float32", ...), from core's dtype
    table through the C++ library. The .out overloads and add_out need none:
    they decompose into the functional op plus a copy (their
    CompositeImplicitAutograd kernels, see `apply_out_rules`). `lib`, when given, is the
    torch.library.Library the registrations belong to.
    """
    accepted = tuple(getattr(torch, n) for n in accepted_dtypes)
    accepted_text = _join(list(accepted_dtypes))

    def check_first(op: str, t: Any, arg: str) -> None:
        torch._check(
            t.dtype in accepted,
            lambda: f"{op}: {arg}: expected dtype {accepted_text}, got {_name(t.dtype)}",
        )

    def check_like(op: str, t: Any, arg: str, ref: Any, ref_name: str) -> None:
        check_device_dtype(torch, op, t, arg, ref, ref_name)
        torch._check(
            t.shape == ref.shape,
            lambda: (
                f"{op}: {arg}: expected shape {list(ref.shape)} (same as {ref_name}), got {list(t.shape)}"
            ),
        )

    def dense(t: Any) -> bool:
        # Named is_non_overlapping_and_dense before torch 2.9; the _or_false form
        # answers False rather than guarding when a dynamic shape leaves it open.
        import torch._prims_common as prims

        names = vars(prims)
        check = names.get("is_non_overlapping_and_dense_or_false") or names["is_non_overlapping_and_dense"]
        return bool(check(t))

    def new_output(*inputs: Any) -> Any:
        # The C++ rule (aten's, TensorIterator): every input dense and
        # non-overlapping with the same strides -> those strides (channels_last,
        # transposed...); otherwise C-contiguous.
        first = inputs[0]
        if (
            first.dim() > 1
            and not first.is_contiguous()
            and all(dense(t) and t.stride() == first.stride() for t in inputs)
        ):
            return torch.empty_strided(first.shape, first.stride(), dtype=first.dtype, device=first.device)
        return torch.empty(first.shape, dtype=first.dtype, device=first.device)

    def fake_binary(op: str) -> Callable[..., Any]:
        def fake(a: Any, b: Any, *scalars: Any) -> Any:
            check_first(op, a, "a")
            check_like(op, b, "b", a, "a")
            return new_output(a, b)

        return fake

    def fake_scale_shift(x: Any, alpha: float, beta: float) -> Any:
        check_first(f"{ns}::scale_shift", x, "x")
        return new_output(x)

    register = torch.library.register_fake
    for op in ("custom_add", "mul", "muladd"):
        register(f"{ns}::{op}", fake_binary(f"{ns}::{op}"), lib=lib)
    register(f"{ns}::scale_shift", fake_scale_shift, lib=lib)


def check_device_dtype(torch: Any, op: str, t: Any, arg: str, ref: Any, ref_name: str) -> None:
    """`t` on `ref`'s device with `ref`'s dtype, or the C++ kernels' sentence."""
    torch._check(
        t.device == ref.device,
        lambda: f"{op}: {arg}: expected device {ref.device} (same as {ref_name}), got {t.device}",
    )
    torch._check(
        t.dtype == ref.dtype,
        lambda: f"{op}: {arg}: expected dtype {_name(ref.dtype)} (same as {ref_name}), got {_name(t.dtype)}",
    )


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def apply_out_rules(torch: Any, op: str, out: Any, like: Any, like_name: str) -> None:
    """The .out overloads' rules (aten's, stricter on shape): `out` must match
    `like` in device and dtype; an empty `out` is resized to like's shape, a
    non-empty one of another shape is refused (aten would warn and resize)."""
    check_device_dtype(torch, op, out, "out", like, like_name)
    if out.shape != like.shape:
        torch._check(
            out.numel() == 0,
            lambda: (
                f"{op}: out: expected shape {list(like.shape)} (same as {like_name}), got {list(out.shape)}"
            ),
        )
        out.resize_(like.shape)
