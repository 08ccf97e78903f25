"""tierkit tools: ``tierkit doctor`` and ``tierkit bench``.

Pure Python; imports the tiers lazily, so it works with any of them — or
none — installed.
"""

from importlib import metadata as _metadata

__version__ = _metadata.version("tierkit")  # one source: the repository's VERSION
