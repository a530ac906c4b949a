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
