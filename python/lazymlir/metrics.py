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
"""

import collections
from typing import Dict, List

_counters: Dict[str, int] = collections.Counter()
_timings: Dict[str, List[float]] = collections.defaultdict(list)


def counter(name: str, increment: int = 1) -> None:
    _counters[name] += increment


def timing(name: str, seconds: float) -> None:
    _timings[name].append(seconds)


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
    for name in sorted(_counters):
        if _counters[name]:
            lines.append(f"Counter: {name}\n  Value: {_counters[name]}")
    return "\n".join(lines) + ("\n" if lines else "")
