"""Autograd for the tierkit_stable ops, registered from Python: torch's stable
C++ API has no autograd. Derived from the op table (tierkit_core.op_table):
its derivative formulas are evaluated with torch's ops. Each functional op gets a torch.autograd.Function
registered as its Autograd kernel, with a backward (reverse mode) and a jvp
(forward mode: torch.func.jvp, jacfwd, forward_ad), so both modes give real
derivatives, never silent zeros. Formulas are written with torch ops, so they
are differentiable in turn (double backward, hessians).

The .out overloads and add_out write into `out` and are not differentiable,
like aten's: they refuse an argument that requires grad or carries a
tangent, and bump `out`'s version counter so autograd sees saved copies go
stale.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.autograd.forward_ad as fwAD
from tierkit_core.op_table import OPS, OUT_WRITERS

_ops = torch.ops.tierkit_stable


def _function(
    name: str, n_tensors: int, backward: Callable[..., tuple], jvp: Callable[..., Any], saves: bool
) -> type[torch.autograd.Function]:
    """An autograd.Function for ns::name(tensors..., scalars...): forward runs
    the op below autograd; backward(grad, *tensors, *scalars) gives the tensor
    inputs' gradients; jvp(tangents, *tensors, *scalars) the output's tangent.
    `saves`: whether the formulas read the inputs' values; when not (a sum, a
    scaling), nothing is saved (an inference tensor can take part, and no
    activation is kept alive), and None stands in for the tensors.

    The ops broadcast and promote like aten's, so a gradient is summed to its
    input's shape and cast to its dtype, and a tangent spans the output."""
    op = getattr(_ops, name).default

    # forward(ctx, ...) rather than setup_context: this Function runs inside a
    # dispatcher kernel, below torch.func's layers, where a setup_context-style
    # Function would be re-routed to functorch's custom_function_call and fail.
    def forward(ctx: Any, *args: Any) -> Any:
        tensors = args[:n_tensors]
        if saves:
            ctx.save_for_backward(*tensors)
            ctx.save_for_forward(*tensors)
        ctx.inputs = [(t.shape, t.dtype) for t in tensors]
        ctx.scalars = args[n_tensors:]
        with torch._C._AutoDispatchBelowAutograd():
            out = op(*args)
        ctx.output = (out.shape, out.dtype)
        return out

    def backward_(ctx: Any, grad: torch.Tensor) -> tuple:
        saved = ctx.saved_tensors if saves else (None,) * n_tensors
        grads = backward(grad, *saved, *ctx.scalars)
        reduced = [
            None if g is None or not need else _to_input(g, shape, dtype)
            for g, need, (shape, dtype) in zip(grads, ctx.needs_input_grad, ctx.inputs)
        ]
        return (*reduced, *[None] * len(ctx.scalars))

    def jvp_(ctx: Any, *tangents: Any) -> Any:
        saved = ctx.saved_tensors if saves else (None,) * n_tensors
        t = jvp(tangents[:n_tensors], *saved, *ctx.scalars)
        shape, dtype = ctx.output
        if t is not None and (t.shape != shape or t.dtype != dtype):
            t = t.expand(shape).to(dtype).clone()
        return t

    return type(
        f"{''.join(p.title() for p in name.split('_'))}Function",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward_),
            "jvp": staticmethod(jvp_),
        },
    )


def _to_input(grad: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A broadcast input's gradient summed over the broadcast dims, in its dtype."""
    g = grad if grad.shape == shape else grad.sum_to_size(shape)
    return g if g.dtype == dtype else g.to(dtype)


# What a formula of the op table may call, bound to torch's functions.
_FORMULA_SCOPE = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}


def _formula(entry: Any, formula: str) -> Callable[..., Any]:
    """An op table formula as a function of (grad, tensors..., scalars...)."""
    params = ", ".join(("grad", *entry.tensors, *entry.scalars))
    return eval(f"lambda {params}: {formula}", dict(_FORMULA_SCOPE))


def _derived(entry: Any) -> type[torch.autograd.Function]:
    """The autograd.Function of an op table entry: backward applies each
    input's derivative to the output's gradient; the tangent is each input's
    derivative applied to its tangent, summed (auto_element_wise)."""
    n = len(entry.tensors)
    grads = [_formula(entry, entry.derivatives[t]) if t in entry.derivatives else None for t in entry.tensors]

    def backward(grad: torch.Tensor, *args: Any) -> tuple:
        return tuple(None if g is None else g(grad, *args) for g in grads)

    def jvp(tangents: tuple, *args: Any) -> Any:
        terms = [g(t, *args) for g, t in zip(grads, tangents) if g is not None and t is not None]
        total = terms[0] if terms else None
        for t in terms[1:]:
            total = total + t
        return total

    return _function(entry.name, n, backward, jvp, saves=bool(entry.saved))


FUNCTIONS = {
    entry.name: (_derived(entry), len(entry.tensors)) for entry in OPS
}  # name: (Function, tensor args)


_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def _derivative_needed(tensors: tuple) -> str | None:
    """What differentiation the arguments ask for: "grad" (one requires grad,
    grad mode on), "tangent" (one carries a forward-mode tangent), or None.
    On every call of every op: plain loops, no tuple or generators built per
    call (with the kernel's call of OpOverload._op: 4.07 -> 3.74 x tierkit's
    per-call time, together; not measured apart)."""
    if _grad_enabled():
        for t in tensors:
            if isinstance(t, _Tensor) and t.requires_grad:  # None: the kernel's check says so
                return "grad"
    if fwAD._current_level >= 0:
        for t in tensors:
            if isinstance(t, _Tensor) and fwAD.unpack_dual(t).tangent is not None:
                return "tangent"
    return None


def _functional_kernel(name: str, fn: type[torch.autograd.Function], n_tensors: int) -> Callable[..., Any]:
    overload = getattr(_ops, name).default
    # The overload's C entry: OpOverload.__call__ only wraps it in a Python
    # frame (0.4 us a call); below autograd, no __torch_function__ applies.
    op = getattr(overload, "_op", overload)
    below = torch._C._AutoDispatchBelowAutograd

    def kernel(*args: Any) -> Any:
        if _derivative_needed(args[:n_tensors]) is None:
            # Nothing to differentiate (no grad needed, or vmap alone): straight
            # to the kernel; autograd.Function.apply costs ~20 us a call even then.
            with below():
                return op(*args)
        if torch._C._are_functorch_transforms_active():
            # This kernel runs below torch.func's layers, where no Python
            # autograd.Function can take part in grad/jvp (torch's own
            # register_autograd gives silent zero tangents there): refuse.
            raise RuntimeError(
                f"tierkit_stable::{name}: torch.func transforms that differentiate (grad, vjp, jvp, jacrev, "
                "jacfwd, hessian) are not supported: the stable C++ API has no autograd, and the Python "
                "autograd registered for this op runs below torch.func. Use torch.autograd.grad / "
                "torch.autograd.forward_ad (both supported), or the tierkit:: ops of tierkit-torch, whose "
                "C++ autograd supports torch.func. (vmap without differentiation works.)"
            )
        return fn.apply(*args)

    return kernel


def _refuse_autodiff(op: str, tensors: tuple, arg: str = "out") -> None:
    needed = _derivative_needed(tensors)
    if needed == "grad":
        raise RuntimeError(
            f"{op}: writes into `{arg}` and does not support automatic differentiation (an argument requires "
            "grad); use the functional overload, or call it under torch.no_grad()"
        )
    if needed == "tangent":
        raise RuntimeError(
            f"{op}: writes into `{arg}` and does not support forward-mode AD (an argument carries a tangent); "
            "use the functional overload"
        )


def refuse_inference_write(qualified: str, arg: str, t: Any) -> None:
    """What torch's ADInplaceOrView kernels say when an op would write an
    inference tensor outside inference mode (r.add_(x) raises it)."""
    if isinstance(t, torch.Tensor) and t.is_inference() and not torch.is_inference_mode_enabled():
        raise RuntimeError(
            f"{qualified}: {arg}: Inplace update to inference tensor outside InferenceMode is not allowed. "
            "You can make a clone to get a normal tensor before doing inplace update."
        )


def in_place_kernels(
    op: Any, qualified: str, arg: str, written: Callable[..., Any]
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The Autograd and ADInplaceOrView kernels of an op that writes into its
    argument `arg` (`written(*args, **kwargs)` picks it out). The Autograd
    kernel refuses derivatives and inference tensors, runs the op below
    ADInplaceOrView and bumps the version. When every argument is an
    inference tensor, dispatch skips Autograd (inference tensors carry no
    autograd key) but not ADInplaceOrView outside inference mode: the second
    kernel refuses there, as aten's do, and costs nothing on other calls."""
    below_view = torch._C._AutoDispatchBelowADInplaceOrView

    def autograd_kernel(*args: Any, **kwargs: Any) -> Any:
        out = written(*args, **kwargs)
        _refuse_autodiff(qualified, (*(a for a in args if isinstance(a, torch.Tensor)), out), arg)
        refuse_inference_write(qualified, arg, out)
        with below_view():
            result = op(*args, **kwargs)
        torch.autograd.graph.increment_version(out)
        return result

    def view_kernel(*args: Any, **kwargs: Any) -> Any:
        out = written(*args, **kwargs)
        refuse_inference_write(qualified, arg, out)
        with below_view():
            result = op(*args, **kwargs)
        if isinstance(out, torch.Tensor) and not out.is_inference():
            torch.autograd.graph.increment_version(out)
        return result

    return autograd_kernel, view_kernel


def _out_kernels(name: str, overload: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    op = getattr(getattr(_ops, name), overload)
    qualified = f"tierkit_stable::{name}" + ("" if overload == "default" else f".{overload}")
    return in_place_kernels(op, qualified, "out", lambda *args, **kwargs: kwargs.get("out", args[-1]))


def register(lib: torch.library.Library) -> None:
    for name, (fn, n_tensors) in FUNCTIONS.items():
        lib.impl(name, _functional_kernel(name, fn, n_tensors), "Autograd")
        _impl_in_place(lib, f"{name}.out", _out_kernels(name, "out"))
    for writer in OUT_WRITERS:
        _impl_in_place(lib, writer.name, _out_kernels(writer.name, "default"))


def _impl_in_place(lib: torch.library.Library, name: str, kernels: tuple) -> None:
    autograd_kernel, view_kernel = kernels
    lib.impl(name, autograd_kernel, "Autograd")
    lib.impl(name, view_kernel, "ADInplaceOrView")
