"""DTensor sharding strategies for the tierkit ops.

Per mesh dimension, what each op of the op table accepts (DTensor expands it
to the full mesh and redistributes inputs that match no strategy):

* every op: all Replicate, or Shard(d) of the output from each input sharded
  on its matching dim (an input broadcast along d stays Replicate);
* Partial, from the table's facts: Partial + Partial -> Partial for a sum
  (``additive``); Partial in one input the op is linear in, the others
  Replicate (``linear_in``: a * b, never Partial * Partial); and only when
  ``partial_when`` holds (no added constant, which would be added once per
  rank).

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


def _partial_rules(entry, scalars) -> list[list[str]]:
    """Which Partial inputs give a Partial output, from the op table's facts:
    all of them for a sum (``additive``), one of ``linear_in`` with the
    others Replicate, and only when ``partial_when`` holds for the scalars."""
    if entry.partial_when and not eval(entry.partial_when, {}, dict(zip(entry.scalars, scalars))):
        return []
    rules = [["P"] * len(entry.tensors)] if entry.additive else []
    rules += [["P" if t == name else "R" for t in entry.tensors] for name in entry.linear_in]
    return rules


def _strategy_of(entry):
    n = len(entry.tensors)

    def strategy(*args):
        return _strategies(args[:n], len(args) - n, _partial_rules(entry, args[n:]))

    return strategy


def register() -> None:
    global _done
    if _done or not torch.distributed.is_available():
        return
    from tierkit_core.op_table import OPS
    from torch.distributed.tensor.experimental import register_sharding

    for entry in OPS:
        register_sharding(getattr(torch.ops.tierkit, entry.name).default)(_strategy_of(entry))
    from . import _rows

    _rows.register_sharding()
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
