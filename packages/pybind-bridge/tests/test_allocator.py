"""The caching allocator's statistics, read from Python."""

import gc

import tierkit_bridge as tb

KEYS = {
    "bytes_in_use",
    "bytes_cached",
    "peak_bytes_in_use",
    "allocations",
    "frees",
    "cache_hits",
    "cache_misses",
}


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
