"""Timing shared by the benchmarks (run them as `python bench/<name>.py`)."""

import statistics
import time


def median_seconds(fn, repeats):
    """Median wall time of `fn()` over `repeats` calls, after two warm-up calls
    (compilation, caches)."""
    fn()
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def interleaved_median_seconds(fns, repeats):
    """Median wall time of each of `fns` (a dict name -> callable) over
    `repeats` rounds, each round calling every fn once in turn, after two
    warm-up rounds. On a shared machine whose load drifts, interleaving gives
    every variant the same conditions, so their ratios are fair."""
    for _ in range(2):
        for fn in fns.values():
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}
