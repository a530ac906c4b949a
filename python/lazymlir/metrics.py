"""Counters and timings, in the spirit of torch._lazy.metrics and torch_xla's.

Counters: ``MarkStep``, ``CachedCompile``, ``UncachedCompile``,
``CompileFallback`` (a graph that failed to compile and ran eagerly),
``EagerGraph`` (a graph run eagerly on purpose, ``LAZYMLIR_FORCE_EAGER``),
``Sync`` (a barrier that executed a graph), ``Replay`` (a graph compiled
before that the device's C++ ran without the Python path; a cache hit too), ``InFlightWait`` (a submission
that waited for the oldest of ``LAZYMLIR_MAX_IN_FLIGHT`` unfinished graphs), ``RecompileShapeChange`` (a graph
compiled again for new input shapes) and ``aten::<op>`` (an op that ran eagerly
because the compiler does not cover it).
Timings (seconds, one sample per event): ``CollectTime`` (graph walk and cache
key), ``LoweringTime`` (torch-mlir import and lowering), ``CompileTime`` (native
compile), ``ExecuteTime``.  Timings and samples keep their count and total
and their last ``WINDOW`` values.
Samples (plain numbers, one per event): ``KernelCount``, the kernels (loop
nests after fusion and tiling) of each graph compiled, read with
``sample_values("KernelCount")``.

Compile time, per graph compiled (see :func:`compile_report` for sums): the
timings ``Compile<Phase>Time`` for the native compiler's phases (``Parse``,
``TensorStage``, ``BufferizeStage``, ``LLVMStage``, ``Translate``,
``Optimize``, ``Codegen``, ``Link``; per-kernel phases summed over kernels
compiled in parallel) and the samples ``LinalgOpsPerGraph``,
``LoopNestsPerGraph``, ``DistinctKernelsPerGraph``, ``KernelsCompiled``,
``KernelsReused`` (compiled before in this process), ``KernelsFromDisk``,
``LLVMInstructionsPerGraph``, ``ObjectBytesPerGraph``. The persistent cache:
counters ``DiskCacheHit`` (a graph loaded from disk, nothing compiled) and
``DiskCacheMiss``, timing ``DiskCacheLoadTime``.  ``lazymlir.kernel_count()`` gives the
kernel count of the last graph run, or of the graph that computed a tensor.
"""

import collections
from typing import Dict, List

# Timings and samples keep their count and total for ever but only the last
# WINDOW values (for medians), like torch_xla's metrics: a training run
# records a few timings per step, and unbounded lists would grow with it.
WINDOW = 1024


class _Series:
    __slots__ = ("count", "total", "values")

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.values = collections.deque(maxlen=WINDOW)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.values.append(value)


_counters: Dict[str, int] = collections.Counter()
_timings: Dict[str, _Series] = collections.defaultdict(_Series)
_samples: Dict[str, _Series] = collections.defaultdict(_Series)


def counter(name: str, increment: int = 1) -> None:
    _counters[name] += increment


def timing(name: str, seconds: float) -> None:
    _timings[name].add(seconds)


def sample(name: str, value: float) -> None:
    """Record one value of a sample metric (e.g. ``KernelCount``)."""
    _samples[name].add(value)


def sample_names() -> List[str]:
    return [name for name, series in _samples.items() if series.count]


def sample_values(name: str) -> List[float]:
    """The last (at most WINDOW) values recorded for a sample metric, oldest
    first ([] if none)."""
    series = _samples.get(name)
    return list(series.values) if series is not None else []


def counter_names() -> List[str]:
    """Names of the counters that are non-zero."""
    return [name for name, value in _counters.items() if value]


def counter_value(name: str) -> int:
    """Value of a counter; 0 if it never fired."""
    return _counters.get(name, 0)


def timing_names() -> List[str]:
    return [name for name, series in _timings.items() if series.count]


def timing_samples(name: str) -> List[float]:
    """The last (at most WINDOW) timings of ``name``, in seconds, oldest first."""
    series = _timings.get(name)
    return list(series.values) if series is not None else []


def executed_fallback_ops() -> List[str]:
    """The aten ops that ran eagerly because they could not be compiled."""
    return sorted(n for n in counter_names() if n.startswith("aten::"))


def _total(series_map, name) -> float:
    series = series_map.get(name)
    return series.total if series is not None else 0.0


# The native compile's phases (compile_stats key -> timing recorded per graph).
COMPILE_PHASES = {
    "parse": "CompileParseTime",
    "tensor_stage": "CompileTensorStageTime",
    "bufferize_stage": "CompileBufferizeStageTime",
    "llvm_stage": "CompileLLVMStageTime",
    "translate": "CompileTranslateTime",
    "optimize": "CompileOptimizeTime",
    "codegen": "CompileCodegenTime",
    "link": "CompileLinkTime",
}

# Sizes of each native compile (compile_stats key -> sample recorded per graph).
COMPILE_SIZES = {
    "input_ops": "LinalgOpsPerGraph",
    "loop_nests": "LoopNestsPerGraph",
    "distinct_kernels": "DistinctKernelsPerGraph",
    "kernels_compiled": "KernelsCompiled",
    "kernels_reused": "KernelsReused",
    "kernels_from_disk": "KernelsFromDisk",
    "llvm_instructions": "LLVMInstructionsPerGraph",
    "object_bytes": "ObjectBytesPerGraph",
}


def compile_report() -> dict:
    """Where compile time went, summed over the graphs compiled since the
    last reset(): ``graphs`` (compiled, not from the disk cache),
    ``disk_hits``, ``phases`` (seconds: torch-mlir ``lowering``, then the
    native compiler's ``parse``, ``tensor_stage``, ``bufferize_stage``,
    ``llvm_stage``, ``translate``, ``optimize``, ``codegen``, ``link``; the
    per-kernel ones summed over kernels compiled in parallel; ``native``:
    the native compiles' wall time), and kernel counts: ``kernels`` (loop
    nests run), ``kernels_compiled``, ``kernels_reused`` (already compiled
    in this process), ``kernels_from_disk``."""
    phases = {"lowering": _total(_timings, "LoweringTime")}
    for key, name in COMPILE_PHASES.items():
        phases[key] = _total(_timings, name)
    phases["native"] = _total(_timings, "CompileTime")
    return {
        "graphs": _samples["LoopNestsPerGraph"].count if "LoopNestsPerGraph" in _samples else 0,
        "disk_hits": counter_value("DiskCacheHit"),
        "phases": phases,
        "kernels": int(_total(_samples, "LoopNestsPerGraph")),
        "kernels_compiled": int(_total(_samples, "KernelsCompiled")),
        "kernels_reused": int(_total(_samples, "KernelsReused")),
        "kernels_from_disk": int(_total(_samples, "KernelsFromDisk")),
    }


def reset() -> None:
    """Clear every counter and timing."""
    _counters.clear()
    _timings.clear()
    _samples.clear()


def metrics_report() -> str:
    """A human-readable report of every counter and timing."""
    lines = []
    for table, fmt in ((_timings, lambda v: f"{v * 1e3:.3f}ms"), (_samples, lambda v: f"{v:g}")):
        for name in sorted(table):
            series = table[name]
            if not series.count:
                continue
            values = sorted(series.values)
            text = (
                f"Metric: {name}\n  TotalSamples: {series.count}\n  Accumulator: {fmt(series.total)}\n"
                f"  Median: {fmt(values[len(values) // 2])}"
            )
            if table is _samples:
                text += f"\n  Max: {fmt(values[-1])}"
            lines.append(text)
    for name in sorted(_counters):
        if _counters[name]:
            lines.append(f"Counter: {name}\n  Value: {_counters[name]}")
    return "\n".join(lines) + ("\n" if lines else "")
