"""``tierkit doctor``: can this machine build and load each tier, and when a
build failed, which layer broke."""

from .report import Check, Status

__all__ = ["Check", "Status"]
