"""DTensor sharding strategies for the tierkit ops.

Per mesh dimension, what each op accepts (DTensor expands it to the full
mesh and redistributes inputs that match no strategy):

* every op: all Replicate, or Shard(d) of the output from each input sharded
  on its matching dim (an input broadcast along d stays Replicate);
* ``custom_add``: Partial + Partial -> Partial (a sum of partial sums is linear);
* ``mul``: Partial * Replicate (either order) -> Partial, never Partial * Partial;
* ``scale_shift`` / ``muladd``: Partial only when the added constant is 0
  (``beta`` / ``c``); otherwise it would be added once per rank.

Registering needs ``torch.distributed.tensor``, which costs seconds to
import, so it happens when (and if) the user imports it: now if it is already
imported, else through an import hook that fires once after it loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch

_DTENSOR = "torch.distributed.tensor"
_done = False


def _strategies(tensors, n_scalars: int, partial: list[list[str]]):
    """The strategies of a broadcasting pointwise op over `tensors` (their
    metadata): Shard(d) of the output shards each input on its own matching
    dim, or replicates an input that is broadcast along d (size 1, or missing)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    pad: list = [None] * n_scalars
    out: list[tuple[list, list]] = [([Replicate()], [Replicate()] * len(tensors) + pad)]
    for d in range(len(shape)):
        placements = []
        for t in tensors:
            k = d - (len(shape) - t.ndim)
            placements.append(Shard(k) if k >= 0 and t.shape[k] == shape[d] else Replicate())
        out.append(([Shard(d)], placements + pad))
    for kinds in partial:
        out.append(([Partial()], [Partial() if k == "P" else Replicate() for k in kinds] + pad))
    return out


def register() -> None:
    global _done
    if _done or not torch.distributed.is_available():
        return
    from torch.distributed.tensor.experimental import register_sharding

    ops = torch.ops.tierkit

    @register_sharding(ops.custom_add.default)
    def _custom_add(a, b):
        return _strategies((a, b), 0, [["P", "P"]])

    @register_sharding(ops.mul.default)
    def _mul(a, b):
        return _strategies((a, b), 0, [["P", "R"], ["R", "P"]])

    @register_sharding(ops.scale_shift.default)
    def _scale_shift(x, alpha, beta):
        return _strategies((x,), 2, [["P"]] if beta == 0 else [])

    @register_sharding(ops.muladd.default)
    def _muladd(a, b, c):
        return _strategies((a, b), 1, [["P", "R"], ["R", "P"]] if c == 0 else [])

    _done = True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `register` once, right after torch.distributed.tensor finishes loading."""

    def find_spec(self, name, path, target=None):
        if name != _DTENSOR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            register()

        spec.loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if _DTENSOR in sys.modules:
        register()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
