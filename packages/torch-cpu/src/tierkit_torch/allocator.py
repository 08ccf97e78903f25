"""The warm memory behind tierkit's fresh CPU outputs: core's caching
allocator, as the C++ library holds it (csrc/warm_allocator.h).

A tierkit op's new output of at least 1 MiB takes a block from this cache
(already faulted in when a dead output left it there) instead of fresh pages
from the system; when the tensor dies its block returns to the cache, up to
``max_cached_bytes`` (1 GiB by default), beyond which blocks go back to the
system. So after a loop of large ops the process holds up to that much freed
memory; ``release_cached()`` returns it, ``set_enabled(False)`` (or
``TIERKIT_WARM_OUTPUTS=0`` in the environment before import) turns the cache
off for new outputs. The tensors are ordinary torch tensors either way.
"""

from __future__ import annotations

import torch

__all__ = ["is_enabled", "release_cached", "set_enabled", "set_max_cached_bytes", "stats", "trim"]

_FIELDS = (
    "bytes_in_use",
    "bytes_cached",
    "peak_bytes_in_use",
    "allocations",
    "frees",
    "cache_hits",
    "cache_misses",
    "failed_allocations",
    "evictions",
    "max_cached_bytes",
)


def stats() -> dict[str, int]:
    """The cache's counters (as ``tierkit_bridge.allocator.stats()``, for this
    library's cache): bytes in use and cached, hits, misses, evictions, the cap."""
    values = list(torch.ops.tierkit._allocator_stats())
    return dict(zip(_FIELDS, values[: len(_FIELDS)]))


def is_enabled() -> bool:
    return bool(torch.ops.tierkit._allocator_stats()[len(_FIELDS)])


def set_enabled(enabled: bool) -> None:
    """New outputs from the cache (True, the default) or from torch's CPU
    allocator (False). Tensors already made keep their memory."""
    torch.ops.tierkit._allocator_set("enabled", 1 if enabled else 0)


def _bytes(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a number of bytes >= 0, got {value!r}")
    return value


def trim(max_bytes: int) -> None:
    """Free cached blocks, largest first, until at most ``max_bytes`` stay cached."""
    torch.ops.tierkit._allocator_set("trim", _bytes("max_bytes", max_bytes))


def release_cached() -> None:
    """Return every cached, unused block to the system."""
    trim(0)


def set_max_cached_bytes(max_bytes: int) -> None:
    """Cap the cache (default 1 GiB); blocks given back beyond it go to the system."""
    torch.ops.tierkit._allocator_set("max_cached_bytes", _bytes("max_bytes", max_bytes))
