"""Timing that survives a noisy machine: interleaved repetitions.

Memory bandwidth here flips between two levels for tens of seconds at a
time, so figures are only comparable when measured side by side. Each
repetition runs every implementation once (in a rotating order), so all of
them see the same machine state; statistics are taken per implementation
over repetitions, and ratios are taken within a repetition.

Each sample starts with one untimed call of its own implementation, so it
does not pay for what the previous one left behind. The case that made this
necessary: torch's OpenMP workers keep spinning for milliseconds after a
torch op returns, and on two cores the bridge's second thread then shares a
core with them (a 1.6e7-element bridge scale_shift took 18.2 ms right after
a torch op, 10.4 ms alone).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from .limit import ERROR


@dataclass
class Samples:
    seconds: list[float]  # per call, one figure per repetition

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        return min(self.seconds)

    @property
    def max(self) -> float:
        return max(self.seconds)


class SelfTimed:
    """An implementation that times itself: called with a number of calls,
    it makes them and returns the seconds a call (the compiled STREAM kernel
    times its loop inside the library, so no Python or ctypes overhead is in
    the limit). ``interleaved`` gives it the same calls a sample as the others."""

    def __init__(self, run: Callable[[int], float]):
        self.run = run

    def __call__(self, calls: int = 1) -> float:
        return self.run(calls)


def per_call(fn: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


SLOW_PEER = 4.0  # an implementation this many times slower than the fastest gets fewer calls a sample


def interleaved(
    impls: dict[str, Callable[[], object]],
    reps: int,
    inner: int = 1,
    warmup: int = 1,
    best_of: int = 1,
    fill_seconds: float = 0.0,
    max_reps: int = 0,
) -> dict[str, Samples]:
    """Per implementation, `reps` samples of the seconds a call (`inner`
    calls a sample), the implementations in a rotating order each
    repetition. ``best_of``: each sample of a plain callable is the fastest
    of that many runs of its calls, back to back, as a SelfTimed limit
    times its own (stream_lib.BEST_OF). A section that reads an op against
    the copy limit passes it, so both sides of the ratio are taken the same
    way: a single call right after another implementation still pays for
    the caches that one left (RMSNorm, float32 [4096, 4096], Xeon: 4.2 ms
    as one call, 2.7 ms as the best of 3, against the limit's 2.5 ms).

    `inner` is sized for the fastest implementation; a plain callable more
    than SLOW_PEER times slower than the fastest (its last warm-up call)
    makes only as many calls a sample as fill the same time, at least one:
    a numpy peer 200x slower than the op took 9 of the 15 s of the quick
    silu probe at the op's `inner`, and one call of it is long enough to
    time. A SelfTimed limit always makes `inner`.

    ``fill_seconds``: more repetitions than `reps` where they fit, as many
    as the warm-up calls' times say fill that many seconds, at most
    ``max_reps`` (0: `reps`). A case of calls of a few milliseconds gets
    repetitions that steady its median (a 0.5 B model's bfloat16 decode
    step, ~55 ms a call, read 0.96x of stock's speed in the models section's
    7 pairs and 1.03x in its ~19 pairs filled; a run of its own, 41 pairs:
    1.04x); one of seconds a call keeps `reps`. A cold first warm-up call
    only makes the count smaller."""
    last: dict[str, float] = {}
    for name, fn in impls.items():
        for _ in range(warmup):
            start = time.perf_counter()
            fn()
            last[name] = time.perf_counter() - start
    names = list(impls)
    plain = [last[n] for n in names if n in last and not isinstance(impls[n], SelfTimed)]
    fastest = min(plain) if plain else 0.0
    calls = {
        n: (
            max(1, math.ceil(inner * fastest / last[n]))
            if n in last and not isinstance(impls[n], SelfTimed) and last[n] > SLOW_PEER * fastest > 0
            else inner
        )
        for n in names
    }
    if fill_seconds > 0 and last:
        # a repetition makes each implementation's settling call and its timed calls
        rep_seconds = sum(last[n] * (1 + calls[n] * best_of) for n in names if n in last)
        if rep_seconds > 0:
            reps = max(reps, min(max_reps or reps, int(fill_seconds / rep_seconds)))
    out: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate: no fixed position bias
        for name in order:
            fn = impls[name]
            fn()  # settle: see the module docstring
            if isinstance(fn, SelfTimed):
                out[name].append(fn(inner))
            else:
                out[name].append(min(per_call(fn, calls[name]) for _ in range(best_of)))
    return {name: Samples(values) for name, values in out.items()}


def paired_ratio(a: Samples, b: Samples) -> float:
    """Median over repetitions of a/b measured in the same repetition."""
    return statistics.median(x / y for x, y in zip(a.seconds, b.seconds))


def inner_for(seconds_per_call_guess: float, budget: float = 0.02) -> int:
    """Calls per sample so one sample lasts about `budget` seconds. Every call
    costs at least a few microseconds of Python and dispatch, whatever n."""
    return max(1, int(budget / (seconds_per_call_guess + 5e-6)))


ROOF_TRIES = 3  # an in-cache figure the op beat at full size is measured again, this many times in all


def in_cache_seconds_per_unit(
    at: Callable[[int], Callable[[], object]],
    small: int,
    large: int,
    reps: int,
    op_seconds: float | None = None,
    units: float = 1.0,
) -> float | None:
    """The compute roof's figure: seconds one unit of work (a row, an
    element) takes on one thread with its operands in cache. ``at(k)`` is
    the op on k units (slices of the measured operands, small enough for
    the core's own caches); the figure is (fastest t(large) - fastest
    t(small)) / (large - small), so the per-call cost of Python, the
    dispatcher and the thread pool drops out, and so does a slow repetition
    (a roof is the best the arithmetic does: the median of the paired
    differences once read a row norm's bfloat16 roof 1.8 ms where the op
    itself took 1.6 ms over memory, and called it 1.16 of its roof). Memory's
    roof is the copy limit; an op whose in-cache speed times the threads is
    below it is bound by its arithmetic there, and that speed is its roof.

    ``op_seconds``: the op's own time on ``units`` units at full size. A
    roof the op beat by more than limit.ERROR is no roof: it is measured
    again, up to ROOF_TRIES times in all, keeping the fastest; one still
    beaten is no roof (roof_fields flags it, and the op is judged against
    the copy limit). None
    where the operands hold no two such sizes (large <= small)."""
    import torch

    if large <= small:
        return None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    best = None
    try:
        fns = {"small": at(small), "large": at(large)}
        inner = inner_for(per_call(fns["large"], 3))
        for _ in range(ROOF_TRIES):
            s = interleaved(fns, reps, inner, warmup=2)
            figure = max(s["large"].min - s["small"].min, 1e-12) / (large - small)
            best = figure if best is None else min(best, figure)
            if op_seconds is None or best * units <= op_seconds * ERROR:
                break
    finally:
        torch.set_num_threads(threads)
    return best


def roof_fields(limit_seconds: float, compute_seconds: float, seconds: float, of_limit: float) -> dict:
    """A row's roof: the limit's time for the op's bytes (``limit_seconds``)
    against its in-cache time on every thread (``compute_seconds``, from
    in_cache_seconds_per_unit); ``of_roof`` the op's median ``seconds``
    against the lower roof, ``of_limit`` where memory's is. An op faster
    than its compute roof by more than limit.ERROR shows the roof was
    measured wrong: ``roof_error``; its target then judges the op against
    the copy limit, the stricter bound (_copy_limit.roof_target)."""
    compute = compute_seconds > limit_seconds
    of_roof = max(of_limit, compute_seconds / seconds)
    return {
        "compute_seconds": compute_seconds,
        "roof": "compute" if compute else "memory",
        "roof_of_limit": min(1.0, limit_seconds / compute_seconds),
        "of_roof": of_roof,
        "roof_error": compute and compute_seconds / seconds > ERROR,
    }
