"""tierkit's torch-side Python, shared by the torch tiers (torch-cpu,
torch-cuda, torch-stable): build helpers (:mod:`.build`) and the op table's
fake kernels, out= rules and typed faces (:mod:`.fake`).

Its own package so that core stays free of torch in both languages, and no
torch tier imports another's Python (torch-stable must load under a torch
that torch-cpu's wheel refuses). Nothing here imports torch: callers pass
the module in.
"""

from __future__ import annotations

from importlib import metadata as _metadata

__version__ = _metadata.version("tierkit-torch-common")  # one source: the repository's VERSION
