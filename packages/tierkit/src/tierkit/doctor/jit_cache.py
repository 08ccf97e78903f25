"""torch's JIT extension cache, and the `lock` files a killed build leaves.

torch.utils.cpp_extension.load() takes a file lock (`<build dir>/lock`) while
it compiles and waits — forever — for one that exists. A build killed
mid-way (Ctrl-C at the wrong moment, OOM, a CI timeout) leaves the lock, and
the next load() hangs silently. While a build runs, its process holds the
lock file open; a lock nobody holds open is stale.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .report import Check, ok, warn


def cache_dir() -> Path:
    """The directory load() builds in by default (as torch computes it)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch_extensions"
    return base


def open_files() -> set[str]:
    """Every path some process on this machine holds open (that we may see)."""
    held: set[str] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                try:
                    held.add(os.readlink(fd))
                except OSError:
                    continue
        except OSError:
            continue
    return held


def find_locks(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("lock") if p.is_file()) if root.is_dir() else []


def stale_locks(root: Path, older_than_min: float) -> list[Path]:
    held = open_files() if sys.platform.startswith("linux") else set()
    cutoff = time.time() - older_than_min * 60
    return [p for p in find_locks(root) if str(p) not in held and p.stat().st_mtime < cutoff]


def jit_cache_checks(
    fix: bool = False, older_than_min: float = 10.0, root: Path | None = None
) -> list[Check]:
    root = root or cache_dir()
    if not root.exists():
        return [ok("JIT cache", f"{root} (not created yet)")]
    locks = find_locks(root)
    stale = stale_locks(root, older_than_min)
    checks = [ok("JIT cache", f"{root}: {len(locks)} lock file(s)")]
    if stale and fix:
        for lock in stale:
            lock.unlink()
        checks.append(ok("JIT locks", f"removed {len(stale)} stale lock(s): {', '.join(map(str, stale))}"))
    elif stale:
        checks.append(
            warn(
                "JIT locks",
                f"{len(stale)} stale (no process holds them, older than {older_than_min:g} min): "
                f"{', '.join(map(str, stale))}",
                "a killed build left them and load() will wait forever: run `tierkit doctor --fix`",
            )
        )
    return checks
