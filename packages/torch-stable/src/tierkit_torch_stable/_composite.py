"""What the .out overloads mean in terms of the functional ops: compute, then
copy into `out` after the out= rules. Registered as CompositeImplicitAutograd,
which eager calls never reach (the CPU kernels in C++ and the Autograd
kernels take precedence): torch.compile's functionalization and fake tensors
use it to turn a mutating .out call into the functional op plus a copy.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from tierkit_core.op_table import OPS, OUT_WRITERS
from tierkit_torch_common.fake import apply_out_rules

_ops = torch.ops.tierkit_stable


def _out_kernel(name: str) -> Callable[..., Any]:
    functional = getattr(_ops, name).default
    op = f"tierkit_stable::{name}.out"

    def kernel(*args: Any, out: torch.Tensor) -> torch.Tensor:
        result = functional(*args)
        apply_out_rules(torch, op, out, result)
        return out.copy_(result)

    return kernel


def _writer_kernel(name: str, of: str) -> Callable[..., Any]:
    functional = getattr(_ops, of).default
    op = f"tierkit_stable::{name}"

    def kernel(*args: Any) -> torch.Tensor:
        # A writer never resizes: `out` must already have the result's shape.
        *inputs, out = args
        result = functional(*inputs)
        apply_out_rules(torch, op, out, result, resize=False)
        return out.copy_(result)

    return kernel


def register(lib: torch.library.Library) -> None:
    for entry in OPS:
        lib.impl(f"{entry.name}.out", _out_kernel(entry.name), "CompositeImplicitAutograd")
    for writer in OUT_WRITERS:
        lib.impl(writer.name, _writer_kernel(writer.name, writer.of), "CompositeImplicitAutograd")
