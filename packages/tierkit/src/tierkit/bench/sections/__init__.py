"""The benchmark's sections, one module each, in report order.

Each module holds everything about its section: ``TITLE``,
``measure(cfg) -> rows`` (or raises ``Skip`` with the reason it cannot run
here), ``markdown(results) -> lines`` (its tables), ``targets(results)`` (its
performance targets) and, where it draws any, ``plots(results, out_dir, plt,
save)``. The runner, the report and the target evaluation loop over them.
"""

from __future__ import annotations

from . import (
    allocation,
    boundary,
    dispatch,
    entries,
    exports,
    gil,
    gpu,
    kernels,
    maps,
    models,
    percall,
    rows,
    silu,
    stable_abi,
    stream,
)
from ._common import Config, Skip

SECTIONS = {
    "stream": stream,
    "kernels": kernels,
    "boundary": boundary,
    "dispatch": dispatch,
    "percall": percall,
    "exports": exports,
    "gil": gil,
    "allocation": allocation,
    "gpu": gpu,
    "stable_abi": stable_abi,
    "silu": silu,
    "rows": rows,
    "maps": maps,
    "models": models,
    "entries": entries,
}

__all__ = ["SECTIONS", "Config", "Skip"]
