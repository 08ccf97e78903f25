"""What the .out overloads mean in terms of the functional ops: compute, then
copy into `out` after the out= rules. Registered as CompositeImplicitAutograd,
which eager calls never reach (the CPU kernels in C++ and the Autograd
kernels take precedence): torch.compile's functionalization and fake tensors
use it to turn a mutating .out call into the functional op plus a copy.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from tierkit_core.torch_fake import apply_out_rules

_ops = torch.ops.tierkit_stable


def _out_kernel(name: str) -> Callable[..., Any]:
    functional = getattr(_ops, name).default
    op = f"tierkit_stable::{name}.out"

    def kernel(*args: Any, out: torch.Tensor) -> torch.Tensor:
        result = functional(*args)
        apply_out_rules(torch, op, out, result)
        return out.copy_(result)

    return kernel


def _add_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    # add_out never resizes: `out` must already have the result's shape.
    result = _ops.custom_add.default(a, b)
    apply_out_rules(torch, "tierkit_stable::add_out", out, result, resize=False)
    return out.copy_(result)


def register(lib: torch.library.Library) -> None:
    for name in ("custom_add", "mul", "muladd", "scale_shift"):
        lib.impl(f"{name}.out", _out_kernel(name), "CompositeImplicitAutograd")
    lib.impl("add_out", _add_out, "CompositeImplicitAutograd")
