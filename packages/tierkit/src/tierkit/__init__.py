"""tierkit tools: ``tierkit doctor`` and ``tierkit bench``.

Pure Python; imports the tiers lazily, so it works with any of them — or
none — installed.
"""

__version__ = "0.1.0"
