"""What the .out overloads mean in terms of the functional ops: compute, then
copy into `out` after the out= rules. Registered as CompositeImplicitAutograd,
which eager calls never reach (the CPU kernels in C++ and the Autograd
kernels take precedence): torch.compile's functionalization and fake tensors
use it to turn a mutating .out call into the functional op plus a copy.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from tierkit_core.torch_fake import apply_out_rules, check_device_dtype

_ops = torch.ops.tierkit_stable


def _out_kernel(name: str, like_name: str) -> Callable[..., Any]:
    functional = getattr(_ops, name).default
    op = f"tierkit_stable::{name}.out"

    def kernel(*args: Any, out: torch.Tensor) -> torch.Tensor:
        result = functional(*args)
        apply_out_rules(torch, op, out, args[0], like_name)
        return out.copy_(result)

    return kernel


def _add_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    # add_out never resizes: `out` must already be like `a` (the C++ kernel's rule).
    result = _ops.custom_add.default(a, b)
    op = "tierkit_stable::add_out"
    check_device_dtype(torch, op, out, "out", a, "a")
    torch._check(
        out.shape == a.shape,
        lambda: f"{op}: out: expected shape {list(a.shape)} (same as a), got {list(out.shape)}",
    )
    return out.copy_(result)


def register(lib: torch.library.Library) -> None:
    for name, like_name in (("custom_add", "a"), ("mul", "a"), ("muladd", "a"), ("scale_shift", "x")):
        lib.impl(f"{name}.out", _out_kernel(name, like_name), "CompositeImplicitAutograd")
    lib.impl("add_out", _add_out, "CompositeImplicitAutograd")
