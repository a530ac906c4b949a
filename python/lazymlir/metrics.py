"""Counters and timings, in the spirit of torch._lazy.metrics and torch_xla's.

Counters: ``MarkStep``, ``CachedCompile``, ``UncachedCompile``,
``CompileFallback`` (a graph that failed to compile and ran eagerly),
``EagerGraph`` (a graph run eagerly on purpose, ``LAZYMLIR_FORCE_EAGER``),
``Sync`` (a barrier that executed a graph), ``RecompileShapeChange`` (a graph
compiled again for new input shapes) and ``aten::<op>`` (an op that ran eagerly
because the compiler does not cover it).
Timings (seconds, one sample per event): ``CollectTime`` (graph walk and cache
key), ``LoweringTime`` (torch-mlir import and lowering), ``CompileTime`` (native
compile), ``ExecuteTime``.
Samples (plain numbers, one per event): ``KernelsPerGraph``, the kernels (loop
nests after fusion and tiling) of each graph compiled, read with
``sample_values("KernelsPerGraph")``.  ``lazymlir.kernel_count()`` gives the
kernel count of the last graph run, or of the graph that computed a tensor.
"""

import collections
from typing import Dict, List

_counters: Dict[str, int] = collections.Counter()
_timings: Dict[str, List[float]] = collections.defaultdict(list)
_samples: Dict[str, List[float]] = collections.defaultdict(list)


def counter(name: str, increment: int = 1) -> None:
    _counters[name] += increment


def timing(name: str, seconds: float) -> None:
    _timings[name].append(seconds)


def sample(name: str, value: float) -> None:
    """Record one value of a sample metric (e.g. ``KernelsPerGraph``)."""
    _samples[name].append(value)


def sample_names() -> List[str]:
    return [name for name, values in _samples.items() if values]


def sample_values(name: str) -> List[float]:
    """The values recorded for a sample metric, oldest first ([] if none)."""
    return list(_samples.get(name, ()))


def counter_names() -> List[str]:
    """Names of the counters that are non-zero."""
    return [name for name, value in _counters.items() if value]


def counter_value(name: str) -> int:
    """Value of a counter; 0 if it never fired."""
    return _counters.get(name, 0)


def timing_names() -> List[str]:
    return [name for name, samples in _timings.items() if samples]


def timing_samples(name: str) -> List[float]:
    return list(_timings.get(name, ()))


def executed_fallback_ops() -> List[str]:
    """The aten ops that ran eagerly because they could not be compiled."""
    return sorted(n for n in counter_names() if n.startswith("aten::"))


def reset() -> None:
    """Clear every counter and timing."""
    _counters.clear()
    _timings.clear()
    _samples.clear()


def metrics_report() -> str:
    """A human-readable report of every counter and timing."""
    lines = []
    for name in sorted(_timings):
        samples = sorted(_timings[name])
        if not samples:
            continue
        total = sum(samples)
        median = samples[len(samples) // 2]
        lines.append(
            f"Metric: {name}\n  TotalSamples: {len(samples)}\n"
            f"  Accumulator: {total * 1e3:.3f}ms\n  Median: {median * 1e3:.3f}ms"
        )
    for name in sorted(_samples):
        values = sorted(_samples[name])
        if not values:
            continue
        lines.append(
            f"Metric: {name}\n  TotalSamples: {len(values)}\n  Accumulator: {sum(values):g}\n"
            f"  Median: {values[len(values) // 2]:g}\n  Max: {values[-1]:g}"
        )
    for name in sorted(_counters):
        if _counters[name]:
            lines.append(f"Counter: {name}\n  Value: {_counters[name]}")
    return "\n".join(lines) + ("\n" if lines else "")
