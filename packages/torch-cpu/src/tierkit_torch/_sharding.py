"""DTensor sharding strategies for the tierkit ops.

Per mesh dimension, what each op accepts (DTensor expands it to the full
mesh and redistributes inputs that match no strategy):

* every op: all Replicate, or all Shard(d) on the same tensor dim d;
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


def _strategies(ndim: int, n_tensors: int, n_scalars: int, partial: list[list[str]]):
    from torch.distributed.tensor import Partial, Replicate, Shard

    pad: list = [None] * n_scalars
    out: list[tuple[list, list]] = [([Replicate()], [Replicate()] * n_tensors + pad)]
    out += [([Shard(d)], [Shard(d)] * n_tensors + pad) for d in range(ndim)]
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
        return _strategies(a.ndim, 2, 0, [["P", "P"]])

    @register_sharding(ops.mul.default)
    def _mul(a, b):
        return _strategies(a.ndim, 2, 0, [["P", "R"], ["R", "P"]])

    @register_sharding(ops.scale_shift.default)
    def _scale_shift(x, alpha, beta):
        return _strategies(x.ndim, 1, 2, [["P"]] if beta == 0 else [])

    @register_sharding(ops.muladd.default)
    def _muladd(a, b, c):
        return _strategies(a.ndim, 2, 1, [["P", "R"], ["R", "P"]] if c == 0 else [])

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
