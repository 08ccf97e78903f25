"""The rules that make the benchmark's limit a limit.

* The limit of a kernel at a size is the faster of the compiled STREAM
  kernel's two store forms (ordinary, non-temporal) at that size and thread
  count, taken per repetition (stream_lib.py, sections/stream.py).
* A size is "beyond the caches" only when every array the kernel touches is
  at least ``BEYOND`` times the last-level cache (all its instances
  together); only there is the limit the memory's. Elsewhere the same kernel
  at the same size is a cache (or mixed) bandwidth, and labelled so.
* A figure above ``ERROR`` times a memory limit is measured again (a
  bandwidth flip: sections/stream.py's REMEASURE); still above, it is a
  measurement error: printed as one, never "met", and it fails the bench
  session. Inside the caches the compiled kernel is a reference, not a roof
  (numpy's add of 1e5 floats ran 1.08x of it in L2 on an AVX-512 Xeon): a
  figure above it there is printed as above the reference, not as an error.
"""

from __future__ import annotations

import glob
import os
import statistics
from collections.abc import Sequence

BEYOND = 4  # every array >= 4 x the last-level cache
ERROR = 1.05  # a figure above 1.05 x its limit cannot be real

# The compiled kernels: name -> (index in stream_kernel.cpp, arrays it touches).
KERNELS = {"copy": (0, 2), "scale": (1, 2), "add": (2, 3), "triad": (3, 3)}
STORES = ("ordinary", "non-temporal")


def _size(text: str) -> int:
    text = text.strip().upper()
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def _cpus(listing: str) -> set[int]:
    out: set[int] = set()
    for part in listing.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def caches(sysfs: str = "/sys/devices/system/cpu") -> list[dict]:
    """Data and unified caches, one entry a level: the size of one instance,
    how many instances (distinct sharing sets over all CPUs) and their total.
    Empty where sysfs does not say."""
    levels: dict[int, dict] = {}
    for index in sorted(glob.glob(os.path.join(sysfs, "cpu[0-9]*", "cache", "index[0-9]*"))):
        try:

            def read(name: str, index: str = index) -> str:
                with open(os.path.join(index, name)) as f:
                    return f.read().strip()

            if read("type") == "Instruction":
                continue
            level, size, shared = int(read("level")), _size(read("size")), read("shared_cpu_list")
        except (OSError, ValueError):
            continue
        entry = levels.setdefault(level, {"level": level, "size": size, "sharing": set()})
        entry["sharing"].add(frozenset(_cpus(shared)))
    out = []
    for level in sorted(levels):
        e = levels[level]
        instances = len(e["sharing"])
        out.append(
            {"level": f"L{level}", "size": e["size"], "instances": instances, "total": e["size"] * instances}
        )
    return out


def llc_bytes(cache_list: Sequence[dict]) -> int | None:
    """The last-level cache, every instance together (the conservative
    reading: an array must outgrow all of it)."""
    return cache_list[-1]["total"] if cache_list else None


def beyond_caches(array_bytes: Sequence[int], cache_list: Sequence[dict]) -> bool:
    """True only when every array is >= BEYOND x the last-level cache. With
    no cache facts, nothing is beyond them (no memory limit is claimed)."""
    llc = llc_bytes(cache_list)
    return llc is not None and bool(array_bytes) and all(b >= BEYOND * llc for b in array_bytes)


def regime(array_bytes: Sequence[int], cache_list: Sequence[dict]) -> str:
    """What a limit measured with these arrays is a limit of: "memory" beyond
    the caches; "L1"/"L2"/"L3" where all the arrays together fit that level
    (its instances together); "mixed" in between (larger than the caches,
    smaller than BEYOND x the last level)."""
    if beyond_caches(array_bytes, cache_list):
        return "memory"
    total = sum(array_bytes)
    for c in cache_list:
        if total <= c["total"]:
            return c["level"]
    return "mixed"


def regime_label(kind: str) -> str:
    if kind == "memory":
        return "memory bandwidth"
    if kind == "mixed":
        return "same-size bandwidth (not beyond the caches)"
    return f"{kind} cache bandwidth"


def limit_seconds(*forms: Sequence[float]) -> list[float]:
    """Per repetition, the fastest form's seconds (the largest GB/s): the
    store forms, and the thread counts up to the op's."""
    return [min(values) for values in zip(*forms)]


def fraction(limit: Sequence[float], seconds: Sequence[float]) -> float:
    """Median over repetitions of limit time / measured time: the measured
    figure's bandwidth as a fraction of the limit's, paired per repetition."""
    return statistics.median(lim / s for lim, s in zip(limit, seconds))


def is_error(frac: float | None, kind: str | None = "memory") -> bool:
    """Above ERROR x a memory limit (``kind`` None or "memory"): not real."""
    return frac is not None and frac > ERROR and kind in (None, "memory")


def above_reference(frac: float | None, kind: str | None) -> bool:
    """Above ERROR x an in-cache reference: faster than the compiled kernel
    there, which is possible (it is not a roof)."""
    return frac is not None and frac > ERROR and kind not in (None, "memory")


def fmt_fraction(frac: float | None, kind: str | None = None) -> str:
    """The "of limit" cell: the fraction and what the limit was; a figure
    above ERROR x its limit says so instead of passing as a result."""
    if frac is None:
        return "—"
    where = "" if kind in (None, "memory") else f" ({kind})"
    if is_error(frac, kind):
        return f"**{frac:.2f}{where}: MEASUREMENT ERROR (> {ERROR} x the limit)**"
    if above_reference(frac, kind):
        return f"{frac:.2f}{where}: above the compiled kernel in cache (a reference, not a roof)"
    return f"{frac:.2f}{where}"


def human(nbytes: float) -> str:
    """Bytes in KiB, MiB or GiB, as lscpu writes cache sizes."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= factor:
            return f"{nbytes / factor:.4g} {unit}"
    return f"{nbytes / 1024:.4g} KiB"
