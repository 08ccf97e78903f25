"""The GIL is released around native loops: other Python threads run meanwhile.

Both tests compare against a baseline measured in the same test (no absolute
timings) with generous margins; the pool is limited to the calling thread so
the only parallelism is the one the GIL release allows.
"""

import hashlib
import os
import threading
import time

import numpy as np
import pytest
import tierkit_bridge as tb


@pytest.fixture
def single_threaded_kernels():
    tb.set_num_threads(1)
    yield
    tb.set_num_threads(0)


def count_for(seconds, stop=None):
    """Spin a pure-Python counter; needs the GIL for every iteration."""
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end and not (stop and stop.is_set()):
        n += 1
    return n


def test_python_thread_progresses_during_a_native_call(single_threaded_kernels):
    x = np.ones(8_000_000, np.float32)
    out = np.empty_like(x)
    tb.scale_shift(x, 2.0, 1.0, out=out)  # warm: page faults out of the way
    start = time.perf_counter()
    tb.scale_shift(x, 2.0, 1.0, out=out)
    one_call = time.perf_counter() - start
    calls = max(3, int(0.4 / max(one_call, 1e-4)))

    solo_rate = count_for(0.2) / 0.2
    stop = threading.Event()
    counted = {}

    def counter():
        t0 = time.perf_counter()
        counted["n"] = count_for(60, stop)
        counted["t"] = time.perf_counter() - t0

    th = threading.Thread(target=counter)
    th.start()
    time.sleep(0.02)
    for _ in range(calls):
        tb.scale_shift(x, 2.0, 1.0, out=out)
    stop.set()
    th.join()
    rate_during = counted["n"] / counted["t"]
    # Holding the GIL through the calls would starve the counter to ~0.
    assert rate_during > 0.25 * solo_rate, (rate_during, solo_rate)


def test_two_threads_run_native_calls_at_once(single_threaded_kernels):
    # Asserted on CPU time, not on speed-up: two threads whose calls release
    # the GIL are on two CPUs at once, so the process burns about 2 s of CPU
    # per second of wall clock; a held GIL parks the other thread on a
    # condition variable (no spinning), about 1 s per second. Speed-up would
    # also depend on the host: CI machines of this kind have given 1.15x for
    # two threads on what lscpu calls two cores, while their CPU time still
    # doubled. The baseline, measured beside it, is hashlib (which releases
    # the GIL for large buffers): when even it cannot keep two CPUs busy (the
    # other core taken by another process), the machine cannot show overlap
    # and the test says so instead of failing.
    # Strided float16 keeps each call ~1 ms of scalar work, so GIL hand-offs
    # between calls are noise.
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to run two threads at once")
    a = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float16)[:, ::2]
    outs = [np.empty((1024, 512), np.float16)[:, ::2], np.empty((1024, 512), np.float16)[:, ::2]]
    blob = bytes(8 << 20)

    def ours(i):
        for _ in range(60):
            tb.muladd(a, a, 1.0, out=outs[i])

    def baseline(i):
        for _ in range(6):
            hashlib.sha256(blob).digest()

    def cpu_per_wall(work):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return (time.process_time() - cpu0) / (time.perf_counter() - wall0)

    ours(0)  # warm
    # A held GIL cannot lift the ratio much above 1, so the best of a few
    # trials cannot pass falsely. Each trial runs ours between two baseline
    # runs, and only a trial whose baselines both kept two CPUs busy can
    # fail it: the load of a shared machine changes within a trial (CI once
    # gave ours 0.93 and hashlib 1.53 in one trial, both under 1 in the next
    # four, while compiles ran beside it).
    trials = []
    for _ in range(5):
        trials.append((cpu_per_wall(baseline), cpu_per_wall(ours), cpu_per_wall(baseline)))
        if trials[-1][1] > 1.5:
            break
    expected = (a.astype(np.float32) * a.astype(np.float32) + 1.0).astype(np.float16)
    np.testing.assert_array_equal(outs[0], expected)
    np.testing.assert_array_equal(outs[1], expected)
    if max(t[1] for t in trials) > 1.5:
        return
    conclusive = [t for t in trials if min(t[0], t[2]) > 1.5]
    if len(conclusive) < 2:
        pytest.skip(
            "the machine is busy: fewer than two trials had hashlib's two threads on two CPUs before and after "
            f"ours; CPU s per wall s (hashlib, ours, hashlib): {trials}"
        )
    raise AssertionError(f"CPU seconds per wall second with two threads (hashlib, ours, hashlib): {trials}")
