"""Leak and thread soaks. Resident memory is read from /proc/self/statm after
a warm-up; the caching allocator's bytes-in-use must return to its start."""

import os
import threading

import numpy as np
import pytest
import tierkit_bridge as tb
import tierkit_torch  # noqa: F401
import torch
from tierkit_core.op_table import OPS
from tierkit_core.op_testing import scalar_values
from tierkit_torch_common import testing

PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1 << 20


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def bridge_calls(n):
    """Every entry of the op table, by its bridge name; every other one into out=."""
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    y = np.random.default_rng(1).random(n, dtype=np.float32)
    out = np.empty_like(x)
    calls = {}
    for i, op in enumerate(OPS):
        fn, args = getattr(tb, op.bridge), (*[x, y][: len(op.tensors)], *scalar_values(op.name))
        calls[op.bridge] = (lambda f=fn, a=args: f(*a, out=out)) if i % 2 else (lambda f=fn, a=args: f(*a))
    return calls


def torch_calls(n):
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    calls = {
        op.name: (lambda name=op.name: testing.call("tierkit", name, *[x, y][: testing.ARITY[name]]))
        for op in OPS
    }
    calls["add_out"] = lambda: torch.ops.tierkit.add_out(x, y, out)
    return calls


def soak(calls, times):
    """Warm up, then `times` calls of each; returns the RSS growth in bytes."""
    for fn in calls.values():
        for _ in range(1000):
            fn()
    start = rss()
    for fn in calls.values():
        for _ in range(times):
            fn()
    return rss() - start


@pytest.mark.parametrize(
    ("family", "n", "times"),
    [
        ("bridge", 16, 1_000_000),  # small inputs: leaks per call would show
        ("torch", 16, 200_000),
        ("bridge", 2 * MiB, 1_000),  # 8 MiB float32 inputs: leaks per buffer would show
        ("torch", 2 * MiB, 1_000),
    ],
    ids=["bridge-small-1e6", "torch-small-2e5", "bridge-8MiB-1e3", "torch-8MiB-1e3"],
)
def test_no_leak(family, n, times, record_property):
    calls = bridge_calls(n) if family == "bridge" else torch_calls(n)
    tb.allocator.release_cached()
    in_use = tb.allocator.stats()["bytes_in_use"]
    growth = soak(calls, times)
    if growth > MiB:
        # A leak grows with every call; growth that happens once (an arena or a
        # lazily built cache reaching its size; seen once in CI: 1.12 MiB over
        # 1e6 calls, 0 on the rerun) does not repeat over a second soak.
        growth = soak(calls, times)
    record_property("rss_growth_bytes", growth)
    print(f"\n{family} n={n} x{times}: RSS growth {growth / MiB:.3f} MiB")
    assert growth <= MiB, f"RSS grew {growth / MiB:.2f} MiB over {times} calls of each op"
    assert tb.allocator.stats()["bytes_in_use"] == in_use


def test_cached_outputs_return_to_the_cache():
    x = np.random.default_rng(0).random(100_000, dtype=np.float32)
    tb.allocator.release_cached()
    start = tb.allocator.stats()
    tb.allocator.set_enabled(True)
    try:
        for _ in range(20_000):
            tb.scale_shift(x, 2.0, 1.0)
    finally:
        tb.allocator.set_enabled(False)
    end = tb.allocator.stats()
    assert end["bytes_in_use"] == start["bytes_in_use"]
    assert end["cache_hits"] - start["cache_hits"] >= 19_999  # all but the first reuse a block
    tb.allocator.release_cached()


def test_thread_soak_exact_results_and_consistent_allocator():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(10_000).astype(np.float32)  # shared, read-only inputs
    b = rng.standard_normal(10_000).astype(np.float32)
    a.flags.writeable = False
    b.flags.writeable = False
    at, bt = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
    expect = {
        "add": a + b,
        "mul": a * b,
        "scale_shift": np.float32(2.0) * a + np.float32(1.0),
        "muladd": a * b + np.float32(0.5),
    }
    tb.allocator.release_cached()
    start = tb.allocator.stats()
    errors = []

    def worker(k):
        out = np.empty_like(a)  # private output
        tout = torch.empty(10_000)
        try:
            for i in range(1000):
                which = (i + k) % 6
                if which == 0:
                    got = tb.add(a, b, out=out)
                    ok = np.array_equal(got, expect["add"])
                elif which == 1:
                    ok = np.array_equal(tb.mul(a, b), expect["mul"])
                elif which == 2:
                    buf = tb.Buffer.empty(10_000, "float32", cached=True)
                    ok = np.array_equal(
                        np.asarray(tb.scale_shift(a, 2.0, 1.0, out=buf)), expect["scale_shift"]
                    )
                elif which == 3:
                    ok = np.array_equal(tb.muladd(a, b, 0.5, out=out), expect["muladd"])
                elif which == 4:
                    ok = np.array_equal(torch.ops.tierkit.custom_add(at, bt).numpy(), expect["add"])
                else:
                    torch.ops.tierkit.add_out(at, bt, tout)
                    ok = np.array_equal(tout.numpy(), expect["add"])
                if not ok:
                    errors.append((k, i, which))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((k, repr(exc)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    end = tb.allocator.stats()
    assert end["bytes_in_use"] == start["bytes_in_use"]
    assert end["allocations"] - start["allocations"] == end["frees"] - start["frees"]
    assert end["cache_hits"] + end["cache_misses"] == end["allocations"]


def test_allocation_failure_is_memory_error_not_abort():
    with pytest.raises(MemoryError):
        tb.Buffer(1 << 60)
    with pytest.raises(MemoryError):
        tb.Buffer(1 << 60, cached=True)
    with pytest.raises(MemoryError):
        tb.Buffer.empty((1 << 31, 1 << 31), "float32")
    with pytest.raises((MemoryError, RuntimeError), match="(?i)alloc"):
        torch.ops.tierkit.custom_add(torch.ones(1).expand(1 << 42), torch.ones(1).expand(1 << 42))
    assert tb.allocator.stats()["bytes_in_use"] >= 0  # the process and allocator are intact
    np.testing.assert_array_equal(tb.add(np.ones(3), np.ones(3)), [2.0, 2.0, 2.0])
