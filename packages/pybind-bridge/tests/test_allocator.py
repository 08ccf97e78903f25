"""The caching allocator's statistics, read from Python."""

import gc
import re
from pathlib import Path

import pytest
import tierkit_bridge as tb
import tierkit_core


def _core_stats_fields() -> set[str]:
    """Every field of core's AllocatorStats, read from the installed header:
    the bridge must expose each one, a field added later included."""
    header = Path(tierkit_core.get_include()) / "tierkit" / "caching_allocator.h"
    body = re.search(r"struct AllocatorStats \{(.*?)\};", header.read_text(), re.S)
    assert body, f"{header}: no struct AllocatorStats"
    fields = re.findall(r"std::(?:size_t|u?int\d+_t) (\w+) = 0;", body.group(1))
    assert len(fields) >= 10, f"{header}: AllocatorStats read as {fields}"
    return set(fields)


KEYS = _core_stats_fields()


def test_stats_is_a_dict_of_counters():
    s = tb.allocator.stats()
    assert set(s) == KEYS and all(isinstance(v, int) and v >= 0 for v in s.values())


def test_deltas_reuse_and_release():
    tb.allocator.release_cached()
    s0 = tb.allocator.stats()
    bufs = [tb.Buffer(3000, cached=True) for _ in range(3)]  # 4096-byte class
    s1 = tb.allocator.stats()
    assert s1["bytes_in_use"] - s0["bytes_in_use"] == 3 * 4096
    assert s1["allocations"] - s0["allocations"] == 3
    assert s1["peak_bytes_in_use"] >= s1["bytes_in_use"]
    del bufs
    gc.collect()
    s2 = tb.allocator.stats()
    assert s2["bytes_in_use"] == s0["bytes_in_use"]
    assert s2["bytes_cached"] == 3 * 4096
    assert s2["frees"] - s0["frees"] == 3
    again = tb.Buffer(4000, cached=True)
    s3 = tb.allocator.stats()
    assert s3["cache_hits"] - s2["cache_hits"] == 1
    assert s3["cache_misses"] == s2["cache_misses"]
    del again
    tb.allocator.release_cached()
    assert tb.allocator.stats()["bytes_cached"] == 0


def test_view_keeps_cached_block_in_use():
    import numpy as np

    b = tb.Buffer.empty(1000, "float64", cached=True)
    arr = np.asarray(b)
    in_use = tb.allocator.stats()["bytes_in_use"]
    del b
    gc.collect()
    assert tb.allocator.stats()["bytes_in_use"] == in_use  # numpy still holds it
    del arr
    gc.collect()
    assert tb.allocator.stats()["bytes_in_use"] == in_use - 8192


def test_cap_and_trim_bound_the_cache():
    default = tb.allocator.stats()["max_cached_bytes"]
    assert default == 1 << 30
    tb.allocator.release_cached()
    try:
        tb.allocator.set_max_cached_bytes(8192)
        bufs = [tb.Buffer(3000, cached=True) for _ in range(4)]  # 4 x 4096 bytes
        del bufs
        gc.collect()
        s = tb.allocator.stats()
        assert s["bytes_cached"] <= 8192 and s["evictions"] >= 2
        tb.allocator.trim(4096)
        assert tb.allocator.stats()["bytes_cached"] <= 4096
    finally:
        tb.allocator.set_max_cached_bytes(default)
        tb.allocator.release_cached()


def test_counters_add_up_after_a_failed_allocation():
    s0 = tb.allocator.stats()
    with pytest.raises(MemoryError):
        tb.Buffer(1 << 60, cached=True)
    s1 = tb.allocator.stats()
    assert s1["failed_allocations"] == s0["failed_allocations"] + 1
    assert s1["cache_hits"] + s1["cache_misses"] == s1["allocations"]
