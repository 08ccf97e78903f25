"""Python-side kernels for the tierkit ops: fake (meta) kernels and autograd.

Both are registered with ``torch.library`` against the schemas the C++
library defined. Fake kernels say what a call returns (shape, dtype, device,
strides) without computing it, which is all ``torch.compile``, ``torch.export``
and meta tensors need; they apply the same checks as the C++ kernels so a
bad call fails the same way while tracing. Autograd is registered here rather
than as a C++ Autograd kernel because the formulas are one line each, compose
with ``torch.compile`` out of the box, and, being written with the tierkit ops
themselves (which are differentiable), give double backward for free.
"""

from __future__ import annotations

import torch

_SUPPORTED = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_registered = False


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_first(op: str, t: torch.Tensor, name: str) -> None:
    torch._check(
        t.dtype in _SUPPORTED,
        lambda: f"{op}: {name}: expected dtype float32, float64, float16 or bfloat16, got {_name(t.dtype)}",
    )


def _check_like(op: str, t: torch.Tensor, name: str, ref: torch.Tensor, ref_name: str) -> None:
    torch._check(
        t.device == ref.device, lambda: f"{op}: {name}: expected device {ref.device} (same as {ref_name}), got {t.device}"
    )
    torch._check(
        t.dtype == ref.dtype, lambda: f"{op}: {name}: expected dtype {_name(ref.dtype)} (same as {ref_name}), got {_name(t.dtype)}"
    )
    torch._check(
        t.shape == ref.shape,
        lambda: f"{op}: {name}: expected shape {list(ref.shape)} (same as {ref_name}), got {list(t.shape)}",
    )


def _new_output(like: torch.Tensor) -> torch.Tensor:
    # The real kernels return a fresh C-contiguous tensor whatever the layout.
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)


def _fake_binary(op: str):
    def fake(a, b, *scalars):
        _check_first(op, a, "a")
        _check_like(op, b, "b", a, "a")
        return _new_output(a)

    return fake


def _fake_scale_shift(x, alpha, beta):
    _check_first("tierkit::scale_shift", x, "x")
    return _new_output(x)


def _fake_add_out(a, b, out):
    op = "tierkit::add_out"
    _check_first(op, a, "a")
    _check_like(op, b, "b", a, "a")
    _check_like(op, out, "out", a, "a")


# ---- autograd ------------------------------------------------------------------


def _save_ab(ctx, inputs, output):
    a, b = inputs[0], inputs[1]
    # Each gradient needs only the *other* input: save just what will be used.
    ctx.save_for_backward(
        b if ctx.needs_input_grad[0] else None,
        a if ctx.needs_input_grad[1] else None,
    )


def _backward_product(ctx, grad):
    b, a = ctx.saved_tensors
    ops = torch.ops.tierkit
    grad_a = ops.mul(grad, b) if ctx.needs_input_grad[0] else None
    grad_b = ops.mul(grad, a) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


def _backward_add(ctx, grad):
    return grad, grad


def _save_alpha(ctx, inputs, output):
    ctx.alpha = inputs[1]


def _backward_scale_shift(ctx, grad):
    return torch.ops.tierkit.scale_shift(grad, ctx.alpha, 0.0), None, None


def _backward_muladd(ctx, grad):
    return (*_backward_product(ctx, grad), None)


def register() -> None:
    """Register fake kernels and autograd formulas (once per process)."""
    global _registered
    if _registered:
        return
    lib = torch.library
    lib.register_fake("tierkit::custom_add", _fake_binary("tierkit::custom_add"))
    lib.register_fake("tierkit::mul", _fake_binary("tierkit::mul"))
    lib.register_fake("tierkit::muladd", _fake_binary("tierkit::muladd"))
    lib.register_fake("tierkit::scale_shift", _fake_scale_shift)
    lib.register_fake("tierkit::add_out", _fake_add_out)

    lib.register_autograd("tierkit::custom_add", _backward_add)
    lib.register_autograd("tierkit::mul", _backward_product, setup_context=_save_ab)
    lib.register_autograd("tierkit::muladd", _backward_muladd, setup_context=_save_ab)
    lib.register_autograd("tierkit::scale_shift", _backward_scale_shift, setup_context=_save_alpha)
    _registered = True
