"""vmap batching rules for the functional tierkit ops.

Each rule moves the batch dimension of every batched tensor to the front and
expands unbatched ones (a stride-0 view, no copy) so the op runs once on the
whole batch: no per-example loop. The ops broadcast, so a tensor of lower
logical rank gets size-1 dims after the batch dim (what broadcasting would
have prepended to it per example). Nested vmap and vmap of grad compose,
because the rule calls the op itself (which has autograd and its own rules).
"""

from __future__ import annotations

import torch


def _front(info, tensor: torch.Tensor, dim: int | None) -> torch.Tensor:
    if dim is None:
        return tensor.unsqueeze(0).expand(info.batch_size, *tensor.shape)
    return tensor.movedim(dim, 0)


def _aligned(info, tensors, dims):
    fronts = [_front(info, t, d) for t, d in zip(tensors, dims)]
    rank = max(t.dim() for t in fronts)
    return [t.reshape(t.shape[:1] + (1,) * (rank - t.dim()) + t.shape[1:]) for t in fronts]


def _pointwise_rule(op, n_tensors: int):
    def rule(info, in_dims, *args):
        return op(*_aligned(info, args[:n_tensors], in_dims[:n_tensors]), *args[n_tensors:]), 0

    return rule


def register() -> None:
    """A rule for every pointwise op of the op table (tierkit_core.op_table)."""
    from tierkit_core.op_table import OPS

    for entry in OPS:
        op = getattr(torch.ops.tierkit, entry.name).default
        torch.library.register_vmap(f"tierkit::{entry.name}", _pointwise_rule(op, len(entry.tensors)))
