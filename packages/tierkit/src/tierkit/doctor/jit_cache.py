"""torch's JIT extension cache, and the `lock` files builds leave there.

How torch.utils.cpp_extension.load() locks a build directory depends on the
release, so the doctor asks the installed torch (torch_cuda.TORCH_PROBE):

* "advisory" (torch 2.14): an OS advisory lock (FileLock) on
  `<dir>/lock`. The file stays after every build and blocks nothing; the
  kernel drops the lock when its holder dies. Nothing to warn about, and
  deleting a lock file another process holds would break the mutual
  exclusion (the next builder would lock a fresh file), so --fix never does.
* "baton" (older releases): a FileBaton, a file created with O_EXCL and held
  open by the building process; its mere existence makes every later load()
  wait forever. A baton nobody holds open is left by a killed build: stale.

Only torch's own layout is considered: `<root>/<tag>/<name>/lock` (and
`<root>/<name>/lock`, where an explicit build_directory or an older torch
puts it). A `build.ninja` beside it is not required: load() takes the lock
*before* it writes build.ninja, so a build killed early leaves exactly a
lock without one. Paths are compared canonically (a symlinked cache dir),
and a lock is never called stale when the doctor cannot see every process's
open files.
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
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch_extensions"


def open_files() -> set[str] | None:
    """Canonical paths every process holds open, or None when some process's
    files cannot be read (another user's, without privileges): then nobody
    can tell whether a lock is held."""
    if not sys.platform.startswith("linux"):
        return None
    held: set[str] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            entries = list(fd_dir.iterdir())
        except FileNotFoundError:
            continue  # the process exited meanwhile
        except PermissionError:
            return None
        for fd in entries:
            try:
                held.add(os.path.realpath(os.readlink(fd)))
            except OSError:
                continue
    return held


def find_locks(root: Path) -> list[Path]:
    """Lock files in torch's layout: <root>/<tag>/<name>/lock or <root>/<name>/lock."""
    if not root.is_dir():
        return []
    return sorted(p for pattern in ("*/lock", "*/*/lock") for p in root.glob(pattern) if p.is_file())


def stale_batons(root: Path, older_than_min: float, held: set[str] | None) -> list[Path]:
    if held is None:
        return []
    cutoff = time.time() - older_than_min * 60
    return [p for p in find_locks(root) if os.path.realpath(p) not in held and p.stat().st_mtime < cutoff]


def jit_cache_checks(
    fix: bool = False,
    older_than_min: float = 10.0,
    root: Path | None = None,
    torch_lock: str | None = None,
    held: set[str] | bool | None = True,
) -> list[Check]:
    """`torch_lock`: "advisory", "baton" or None/"unknown" (torch_cuda.TORCH_PROBE).
    `held`: the open-file set to use (tests); True means look at /proc."""
    root = root or cache_dir()
    if not root.exists():
        return [ok("JIT cache", f"{root} (not created yet)")]
    locks = find_locks(root)
    if torch_lock == "advisory":
        return [
            ok(
                "JIT cache",
                f"{root}: {len(locks)} lock file(s); this torch locks builds with an OS advisory lock, "
                "so a lock file left behind blocks nothing",
            )
        ]
    if torch_lock != "baton":
        return [
            ok("JIT cache", f"{root}: {len(locks)} lock file(s); torch's locking scheme unknown: not judged")
        ]
    open_set: set[str] | None
    if held is True:
        open_set = open_files()
    elif held is False:
        open_set = None
    else:
        open_set = held
    if open_set is None:
        return [
            ok("JIT cache", f"{root}: {len(locks)} lock file(s)"),
            warn(
                "JIT locks",
                "cannot see every process's open files, so cannot tell a held lock from a stale one",
                "run the doctor as a user who can read /proc/*/fd (or check the builds yourself)",
            )
            if locks
            else ok("JIT locks", "none"),
        ]
    stale = stale_batons(root, older_than_min, open_set)
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
