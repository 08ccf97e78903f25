"""The row reductions (rms_norm and its family) on the stable tier: their
autograd, registered from Python (the stable C++ API has none), plus the
faces and vmap rules torch-common writes for any namespace. Kernels: csrc/rms_norm.cpp; fakes: torch-common's.

Autograd follows tierkit::'s C++ one (torch-cpu's csrc/rms_norm_autograd.cpp):
rms_norm saves the kernel's per-row rstd and its backward is the fused
_rms_norm_backward, or aten's ops under create_graph (double backward,
hessians); add_rms_norm is x + residual then rms_norm when differentiated;
add_rms_norm_ and the building blocks refuse a derivative rather than cut it.
"""

from __future__ import annotations

from typing import Any

import torch
from tierkit_torch_common.fake import row_reduction_checks
from tierkit_torch_common.norms import register_row_reduction_vmap, row_reduction_faces

from ._autograd import _derivative_needed, in_place_kernels

_ops = torch.ops.tierkit_stable


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)


def _default_eps(x: torch.Tensor, eps: float | None) -> float:
    if eps is not None:
        return eps
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


def _rstd(xf: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)


def _composite_backward(grad, x, w, eps):
    """Both gradients by the formulas, on aten's ops: what double backward differentiates."""
    xf, gf = _wide(x), _wide(grad)
    r = _rstd(xf, eps)
    xhat = xf * r
    gw = gf * _wide(w) if w is not None else gf
    dx = (r * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))).to(x.dtype)
    dw = None
    if w is not None:
        lead = list(range(x.dim() - 1))
        dw = ((gf * xhat).sum(lead) if lead else gf * xhat).to(w.dtype)
    return dx, dw


def _saveable(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.clone() if t is not None and t.is_inference() else t


class RmsNormFunction(torch.autograd.Function):
    # forward(ctx, ...) rather than setup_context: it runs inside a dispatcher
    # kernel (see _autograd._function).
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, eps: float | None) -> torch.Tensor:
        e = _default_eps(x, eps)
        with torch._C._AutoDispatchBelowAutograd():
            y, rstd = _ops._rms_norm_forward.default(x, weight, e)
        # An inference tensor cannot be saved for backward; aten's F.rms_norm
        # still differentiates an inference x against a weight that requires
        # grad (and the reverse), so such an argument is saved as a normal copy.
        x = x.clone() if x.is_inference() else x
        weight = _saveable(weight)
        ctx.save_for_backward(x, weight, rstd)
        ctx.save_for_forward(x, weight)
        ctx.eps = e
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, w, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a differentiable backward
            dx, dw = _composite_backward(grad, x, w, ctx.eps)
        else:
            with torch._C._AutoDispatchBelowAutograd():
                dx, dw = _ops._rms_norm_backward.default(grad, x, w, rstd)
        need_x, need_w, _ = ctx.needs_input_grad
        return (dx if need_x else None, dw if need_w and w is not None else None, None)

    @staticmethod
    def jvp(ctx: Any, tx: torch.Tensor | None, tw: torch.Tensor | None, _: Any) -> torch.Tensor | None:
        # d(x r w) with dr = -r^3 mean(x dx), in the compute type, rounded once.
        x, w = ctx.saved_tensors
        if tx is None and tw is None:
            return None
        xf = _wide(x)
        r = _rstd(xf, ctx.eps)
        terms = []
        if tx is not None:
            txf = _wide(tx)
            t = txf * r + xf * (-(r * r * r) * (xf * txf).mean(-1, keepdim=True))
            terms.append(t * _wide(w) if w is not None else t)
        if tw is not None:
            terms.append(xf * r * _wide(tw))
        total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        return total.to(x.dtype)


def _refuse_in_torch_func(name: str) -> None:
    if torch._C._are_functorch_transforms_active():
        raise RuntimeError(
            f"tierkit_stable::{name}: torch.func transforms that differentiate (grad, vjp, jvp, jacrev, "
            "jacfwd, hessian) are not supported: the stable C++ API has no autograd, and the Python "
            "autograd registered for this op runs below torch.func. Use torch.autograd.grad / "
            "torch.autograd.forward_ad (both supported), or the tierkit:: ops of tierkit-torch. "
            "(vmap without differentiation works.)"
        )


def _tensors(*args: Any) -> tuple:
    return tuple(a for a in args if isinstance(a, torch.Tensor))


def _checks() -> tuple:
    """The ops' own checks and messages (torch-common's, as the fake kernels'),
    run before a differentiable path calls the building blocks, so an error
    names the op called. Built on first use: the accepted dtypes come from the
    loaded library."""
    global _CHECKS
    if _CHECKS is None:
        _CHECKS = row_reduction_checks(torch, list(_ops._accepted_dtypes()))
    return _CHECKS


_CHECKS: tuple | None = None


def _rms_norm_autograd(x, weight=None, eps=None):
    if _derivative_needed(_tensors(x, weight)) is None:
        with torch._C._AutoDispatchBelowAutograd():
            return _ops.rms_norm.default(x, weight, eps)
    _refuse_in_torch_func("rms_norm")
    check, _ = _checks()
    check("tierkit_stable::rms_norm", x, weight)
    return RmsNormFunction.apply(x, weight, eps)


def _add_rms_norm_autograd(x, residual, weight=None, eps=None):
    if _derivative_needed(_tensors(x, residual, weight)) is None:
        with torch._C._AutoDispatchBelowAutograd():
            return _ops.add_rms_norm.default(x, residual, weight, eps)
    _refuse_in_torch_func("add_rms_norm")
    # Differentiated: x + residual, then rms_norm, each with its own autograd.
    check, same = _checks()
    check("tierkit_stable::add_rms_norm", x, weight)
    same("tierkit_stable::add_rms_norm", residual, "residual", x)
    h = x + residual
    return _ops.rms_norm.default(h, weight, eps), h


def _add_rms_norm__kernels() -> tuple:
    """add_rms_norm_'s Autograd and ADInplaceOrView kernels: it writes into
    `residual` (refused when it needs a derivative, or is an inference tensor
    outside inference mode, as the .out overloads are)."""
    return in_place_kernels(
        _ops.add_rms_norm_.default,
        "tierkit_stable::add_rms_norm_",
        "residual",
        lambda x, residual, *rest, **kwargs: residual,
    )


def _forward_autograd(x, weight, eps):
    # Every tensor argument counts: one that requires grad (or carries a
    # tangent) would otherwise get outputs that silently do not.
    if _derivative_needed(_tensors(x, weight)) is not None:
        raise RuntimeError(
            "tierkit_stable::_rms_norm_forward: not differentiable (a building block of "
            "tierkit_stable::rms_norm's autograd; an argument requires grad or carries a tangent); call "
            "tierkit_stable::rms_norm"
        )
    with torch._C._AutoDispatchBelowAutograd():
        return _ops._rms_norm_forward.default(x, weight, eps)


def _backward_autograd(grad, x, weight, rstd):
    if _derivative_needed(_tensors(grad, x, weight, rstd)) is not None:
        raise RuntimeError(
            "tierkit_stable::_rms_norm_backward: not differentiable (an argument requires grad or carries a "
            "tangent; tierkit_stable::rms_norm's double backward uses aten's ops instead)"
        )
    with torch._C._AutoDispatchBelowAutograd():
        return _ops._rms_norm_backward.default(grad, x, weight, rstd)


def register(lib: torch.library.Library) -> None:
    lib.impl("rms_norm", _rms_norm_autograd, "Autograd")
    lib.impl("add_rms_norm", _add_rms_norm_autograd, "Autograd")
    add_autograd, add_view = _add_rms_norm__kernels()
    lib.impl("add_rms_norm_", add_autograd, "Autograd")
    lib.impl("add_rms_norm_", add_view, "ADInplaceOrView")
    lib.impl("_rms_norm_forward", _forward_autograd, "Autograd")
    lib.impl("_rms_norm_backward", _backward_autograd, "Autograd")
    register_row_reduction_vmap(torch, "tierkit_stable")


FACES = row_reduction_faces(_ops)  # tierkit_torch_stable.ops re-exports them
for _f in FACES.values():
    _f.__module__ = "tierkit_torch_stable.ops"
