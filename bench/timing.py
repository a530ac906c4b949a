"""Timing shared by the benchmarks (run them as `python bench/<name>.py`)."""

import statistics
import time

# Warm-up calls before timing: compilation, caches, and enough runs for
# tiered compilation to recompile the graphs' kernels at full effort
# (lazymlir recompiles a graph in the background after its fourth run).
WARMUP = 5


def settle():
    """Wait until lazymlir's background compiler has recompiled every hot
    graph at full effort: timings then measure the steady state."""
    import lazymlir

    lazymlir.wait_device_ops()
    lazymlir.cache.wait_background_compiles()


def median_seconds(fn, repeats):
    """Median wall time of `fn()` over `repeats` calls, after WARMUP warm-up
    calls and settle()."""
    for _ in range(WARMUP):
        fn()
    settle()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


class Elapsed(float):
    """Seconds a benchmarked callable measured itself (e.g. the tracing part
    of a step only): when a callable timed by :func:`interleaved_samples`
    returns one, it is the sample instead of the call's wall time."""


def interleaved_samples(fns, repeats, warmup=WARMUP):
    """Wall times (seconds) of each of `fns` (a dict name -> callable) over
    `repeats` rounds, each round calling every fn once in turn, after
    `warmup` warm-up rounds and settle(): a dict name -> list of samples. On
    a shared machine whose load drifts, interleaving gives every variant the
    same conditions, so their ratios are fair. A callable that returns an
    :class:`Elapsed` reports its own sample."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    settle()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            result = fn()
            elapsed = time.perf_counter() - t0
            samples[name].append(float(result) if isinstance(result, Elapsed) else elapsed)
    return samples


def interleaved_median_seconds(fns, repeats):
    """Median wall time of each of `fns` (a dict name -> callable) over
    `repeats` rounds, each round calling every fn once in turn (see
    :func:`interleaved_samples`), after WARMUP warm-up rounds and settle()."""
    return {name: statistics.median(s) for name, s in interleaved_samples(fns, repeats).items()}
