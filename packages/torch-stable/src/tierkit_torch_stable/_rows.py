"""The row reductions (every ROW_REDUCTIONS entry of the op table) on the
stable tier: their autograd, registered from Python (the stable C++ API has
none), plus the faces and vmap rules torch-common writes for any namespace.
Kernels: csrc/rows.cpp; fakes: torch-common's.

Autograd follows tierkit::'s C++ one (torch-cpu's csrc/row_autograd.cpp):
the op saves the kernel's per-row stats and its backward is the fused
_<name>_backward, or, under create_graph (double backward, hessians), the
entry's gradient formulas on aten's ops (the op table's, which tierkit::
uses too); the forward-mode tangent is its reference formula's. The fused residual form is x + residual then the op when
differentiated; the in-place form and the building blocks refuse a
derivative rather than cut it.
"""

from __future__ import annotations

from typing import Any

import torch
from tierkit_core.op_table import ROW_IN_PLACE, ROW_REDUCTIONS, RowOp, RowReduction
from tierkit_torch_common.row_ops import (
    check_dim,
    register_row_op_vmap,
    row_op_checks,
    row_op_faces,
    scalar_default,
)
from tierkit_torch_common.rows import default_eps, gradients, reference

from ._autograd import _derivative_needed, in_place_kernels

_ops = torch.ops.tierkit_stable


def _saveable(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.clone() if t is not None and t.is_inference() else t


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


_CHECKS: tuple | None = None


def _checks() -> tuple:
    """The ops' own checks and messages (torch-common's, as the fake kernels'),
    run before a differentiable path calls the building blocks, so an error
    names the op called. Built on first use: the accepted dtypes come from the
    loaded library."""
    global _CHECKS
    if _CHECKS is None:
        _CHECKS = row_op_checks(torch, list(_ops._accepted_dtypes()))
    return _CHECKS


def _function(entry: RowReduction) -> type:
    """The entry's autograd.Function: forward (x, params..., eps) -> y."""
    p = len(entry.params)
    forward_op = getattr(_ops, entry.forward_name).default
    backward_op = getattr(_ops, entry.backward_name).default

    class RowFunction(torch.autograd.Function):
        # forward(ctx, ...) rather than setup_context: it runs inside a
        # dispatcher kernel (see _autograd._function).
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, *rest: Any) -> torch.Tensor:
            params, eps = rest[:p], default_eps(torch, entry, x, rest[p])
            with torch._C._AutoDispatchBelowAutograd():
                y, stats = forward_op(x, *params, *([eps] if entry.has_eps else []))
            # An inference tensor cannot be saved for backward; aten's norms
            # still differentiate an inference x against a weight that
            # requires grad (and the reverse), so it is saved as a normal copy.
            saved = (_saveable(x), *(_saveable(q) for q in params))
            ctx.save_for_backward(*saved, stats)
            ctx.save_for_forward(*saved)
            ctx.eps = eps
            return y

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple:
            x, *rest = ctx.saved_tensors
            params, stats = rest[:p], rest[p]
            needs = ctx.needs_input_grad
            if torch.is_grad_enabled():  # create_graph: the formulas on aten's ops, differentiable
                grads = gradients(torch, entry, grad, x, params, ctx.eps)
            else:
                with torch._C._AutoDispatchBelowAutograd():
                    out = backward_op(grad, x, *params, stats)
                grads = list(out) if isinstance(out, tuple) else [out]
            out = [grads[0] if needs[0] else None]
            out += [grads[i + 1] if needs[i + 1] and params[i] is not None else None for i in range(p)]
            return (*out, None)

        @staticmethod
        def jvp(ctx: Any, tx: torch.Tensor | None, *tangents: Any) -> torch.Tensor | None:
            x, *params = ctx.saved_tensors
            primals = (x, *params)
            tans = (tx, *tangents[:p])
            if all(t is None for t in tans):
                return None
            # The reference's tangent, by torch.autograd.functional.jvp (the
            # double-vjp form: forward AD cannot nest a level here).
            used = [i for i, q in enumerate(primals) if q is not None]

            def f(*args: torch.Tensor) -> torch.Tensor:
                full: list[Any] = list(primals)
                for i, a in zip(used, args):
                    full[i] = a
                return reference(torch, entry, full[0], full[1:], ctx.eps)

            inputs = tuple(primals[i].detach() for i in used)
            vs = tuple(tans[i] if tans[i] is not None else torch.zeros_like(primals[i]) for i in used)
            with torch.enable_grad():
                _, t = torch.autograd.functional.jvp(f, inputs, vs)
            return t.to(x.dtype)

    RowFunction.__name__ = RowFunction.__qualname__ = (
        "".join(w.title() for w in entry.name.split("_")) + "Function"
    )
    return RowFunction


def _kernels(entry: RowReduction) -> dict[str, Any]:
    """The Autograd (and, for the in-place form, ADInplaceOrView) kernels of every overload of the entry."""
    p = len(entry.params)
    fn = _function(entry)
    op = getattr(_ops, entry.name).default
    ns = "tierkit_stable::"

    def split(rest: tuple, kwargs: dict) -> tuple:
        params = list(rest[:p]) + [None] * (p - len(rest[:p]))
        for i, name in enumerate(entry.params):
            if name in kwargs:
                params[i] = kwargs[name]
        scalar = "dim" if entry.has_dim else "eps"
        eps = rest[p] if len(rest) > p else kwargs.get(scalar, scalar_default(entry))
        return tuple(params), eps

    def op_autograd(x, *rest, **kwargs):
        params, eps = split(rest, kwargs)
        if _derivative_needed(_tensors(x, *params)) is None:
            with torch._C._AutoDispatchBelowAutograd():
                return op(x, *params, eps)
        _refuse_in_torch_func(entry.name)
        check, _ = _checks()
        if entry.has_dim:  # along the last dim of x moved; movedim carries the derivatives
            d = check_dim(torch, ns + entry.name, x, eps)
            if x.dim() == 0:  # one row of one element
                return fn.apply(x.unsqueeze(0), *params, None).squeeze(0)
            rows = x.movedim(d, -1)
            check(ns + entry.name, entry, rows, params)
            y = fn.apply(rows, *params, None)
            return y if d == x.dim() - 1 else y.movedim(-1, d).contiguous()
        check(ns + entry.name, entry, x, params)
        return fn.apply(x, *params, eps)

    kernels: dict[str, Any] = {f"{entry.name}:Autograd": op_autograd}

    if entry.fused_add:
        add_op = getattr(_ops, entry.add_name).default

        def add_autograd(x, residual, *rest, **kwargs):
            params, eps = split(rest, kwargs)
            if _derivative_needed(_tensors(x, residual, *params)) is None:
                with torch._C._AutoDispatchBelowAutograd():
                    return add_op(x, residual, *params, eps)
            _refuse_in_torch_func(entry.add_name)
            # Differentiated: x + residual, then the op, each with its own autograd.
            check, same = _checks()
            check(ns + entry.add_name, entry, x, params)
            same(ns + entry.add_name, residual, "residual", x)
            h = x + residual
            return op(h, *params, eps), h

        inplace_autograd, inplace_view = in_place_kernels(
            getattr(_ops, entry.add_name + "_").default,
            ns + entry.add_name + "_",
            "residual",
            lambda x, residual, *rest, **kwargs: residual,
        )
        kernels[f"{entry.add_name}:Autograd"] = add_autograd
        kernels[f"{entry.add_name}_:Autograd"] = inplace_autograd
        kernels[f"{entry.add_name}_:ADInplaceOrView"] = inplace_view

    forward_op = getattr(_ops, entry.forward_name).default
    backward_op = getattr(_ops, entry.backward_name).default

    def forward_autograd(*args):
        # Every tensor argument counts: one that requires grad (or carries a
        # tangent) would otherwise get outputs that silently do not.
        if _derivative_needed(_tensors(*args)) is not None:
            raise RuntimeError(
                f"{ns}{entry.forward_name}: not differentiable (a building block of {ns}{entry.name}'s "
                f"autograd; an argument requires grad or carries a tangent); call {ns}{entry.name}"
            )
        with torch._C._AutoDispatchBelowAutograd():
            return forward_op(*args)

    def backward_autograd(*args):
        if _derivative_needed(_tensors(*args)) is not None:
            raise RuntimeError(
                f"{ns}{entry.backward_name}: not differentiable (an argument requires grad or carries a "
                f"tangent; {ns}{entry.name}'s double backward differentiates its reference with aten's ops "
                "instead)"
            )
        with torch._C._AutoDispatchBelowAutograd():
            return backward_op(*args)

    kernels[f"{entry.forward_name}:Autograd"] = forward_autograd
    kernels[f"{entry.backward_name}:Autograd"] = backward_autograd
    return kernels


def _in_place_kernels(entry: RowOp) -> dict[str, Any]:
    """An in-place entry's Autograd kernel (refusing a derivative it cannot
    give, as tierkit::'s C++ one; then below ADInplaceOrView, each written
    tensor's version bumped) and its ADInplaceOrView kernel (the versions,
    when dispatch skips Autograd)."""
    op = getattr(_ops, entry.name).default
    qualified = f"tierkit_stable::{entry.name}"
    below_view = torch._C._AutoDispatchBelowADInplaceOrView

    def written(args: tuple) -> list[torch.Tensor]:
        return [a for a, arg in zip(args, entry.args) if arg.written and isinstance(a, torch.Tensor)]

    def call(args: tuple) -> None:
        with below_view():
            op(*args)
        for t in written(args):
            if not t.is_inference():
                torch.autograd.graph.increment_version(t)

    def autograd_kernel(*args: Any) -> None:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            raise RuntimeError(
                f"{qualified}: writes query and key in place and is not differentiable (an argument requires "
                "grad); call it under torch.no_grad() or torch.inference_mode(), as vLLM does"
            )
        call(args)

    return {
        f"{entry.name}:Autograd": autograd_kernel,
        f"{entry.name}:ADInplaceOrView": lambda *args: call(args),
    }


def register(lib: torch.library.Library) -> None:
    for entry in ROW_REDUCTIONS:
        for key, kernel in _kernels(entry).items():
            name, dispatch_key = key.split(":")
            lib.impl(name, kernel, dispatch_key)
    for entry in ROW_IN_PLACE:
        for key, kernel in _in_place_kernels(entry).items():
            name, dispatch_key = key.split(":")
            lib.impl(name, kernel, dispatch_key)
    register_row_op_vmap(torch, "tierkit_stable")


# Both row kinds' faces (the maps': torch-common's row_maps); tierkit_torch_stable.ops re-exports them.
FACES = row_op_faces(_ops, "tierkit_torch_stable")
