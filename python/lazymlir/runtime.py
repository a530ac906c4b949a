"""Execute a traced graph: cache lookup, compile on a miss, run, return CPU tensors.

Compiled graphs use destination passing: outputs are allocated here with torch
and written in place by the executable.  A graph that cannot be compiled runs
eagerly, op by op, as an FX GraphModule on CPU tensors; the failure is cached so
it is not retried.  Execution is synchronous for now: ``wait_device_ops`` is the
place an asynchronous worker will be waited for.
"""

import time
import warnings
from typing import Callable, List, Sequence

import torch

from . import cache, config, debug, lowering, metrics, trace

# The dtypes the native compiler takes; a graph touching another runs eagerly.
SUPPORTED_DTYPES = frozenset({torch.float32, torch.float64, torch.int32, torch.int64, torch.bool})

# The native compiler (lazymlir.compiler over the C++ build), imported at the
# first compilation: the tracer, the lowering and eager execution work without it.
_compiler = None
_compiler_import_error = None


def native_compiler():
    """The lazymlir.compiler module, or None when the native build is missing."""
    global _compiler, _compiler_import_error
    if _compiler is None and _compiler_import_error is None:
        try:
            from . import compiler

            _compiler = compiler
        except ImportError as e:
            _compiler_import_error = str(e)
    return _compiler


class _Compiled:
    __slots__ = ("executable", "out_specs", "output_map")

    def __init__(self, executable, out_specs, output_map):
        self.executable = executable
        self.out_specs = out_specs  # one per result of the executable
        self.output_map = output_map  # graph output -> result (results are deduplicated)

    def run(self, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        outs = [torch.empty(shape, dtype=dtype) for shape, dtype in self.out_specs]
        t0 = time.perf_counter()
        self.executable.run(inputs, outs)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)
        # Outputs that are one value share its tensor: device data is immutable.
        return [outs[i] for i in self.output_map]


class _Eager:
    """A graph run op by op on CPU; ``counter`` says why (for the metrics)."""

    __slots__ = ("gm", "counter")

    def __init__(self, gm, counter):
        self.gm = gm
        self.counter = counter

    def run(self, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        metrics.counter(self.counter)
        t0 = time.perf_counter()
        with torch.no_grad():
            outs = [o.contiguous() for o in self.gm(*inputs)]
        metrics.timing("ExecuteTime", time.perf_counter() - t0)
        return outs


# Called with each op found not to lower alone (device.py makes it run eagerly).
unsupported_op_listeners: List[Callable] = []


def execute(outputs: Sequence[trace.Node]) -> List[torch.Tensor]:
    """Compute ``outputs`` (distinct nodes without data) and return their values as
    contiguous CPU tensors, in order."""
    t0 = time.perf_counter()
    graph = trace.collect(outputs, config.options_key())
    metrics.timing("CollectTime", time.perf_counter() - t0)
    entry = cache.lookup(graph.key)
    if entry is None:
        entry = _compile(graph)
    elif type(entry) is _Compiled:
        metrics.counter("CachedCompile")
    return entry.run([n.data for n in graph.inputs])


# Recompiling one graph structure for new input shapes is the recompilation storm
# users of lazy systems dread: it is counted, and reported when it repeats.
STORM_WARNING_AT = 8


def _note_shapes(graph: trace.Graph, name: str) -> None:
    """Best effort: a graph whose ops carry sizes (view, zeros) looks new, not
    recompiled, when those sizes change."""
    n_inputs = len(graph.inputs)
    entries = graph.key[0]
    shapes = tuple(tuple(n.data.shape) for n in graph.inputs)
    structure = (tuple(e if type(e[0]) is not torch.Size else (len(e[0]), e[1]) for e in entries),) + graph.key[1:]
    seen = cache.shapes_seen(structure)
    if seen:
        metrics.counter("RecompileShapeChange")
        changed = [i for i in range(n_inputs) if shapes[i] != seen[-1][i]]
        if config.verbose:
            print(f"lazymlir: recompiling graph {name}: input shapes changed at {changed}: "
                  f"{[seen[-1][i] for i in changed]} -> {[shapes[i] for i in changed]}")
        if len(seen) + 1 == STORM_WARNING_AT:
            warnings.warn(
                f"lazymlir: one graph ({len(graph.nodes)} ops, now {name}) has been compiled for "
                f"{STORM_WARNING_AT} different input shapes; pad or bucket the shapes to stop recompiling",
                RuntimeWarning,
                stacklevel=4,
            )
    seen.append(shapes)


def _compile(graph: trace.Graph):
    t0 = time.perf_counter()
    gm = trace.to_fx(graph)
    name = trace.graph_hash(graph.key)
    _note_shapes(graph, name)
    entry = None
    metas = [n.meta for n in graph.outputs]
    dtypes = {n.data.dtype for n in graph.inputs} | {m.dtype for m in metas}
    if config.force_eager:
        entry = _Eager(gm, "EagerGraph")
    elif not dtypes <= SUPPORTED_DTYPES:
        entry = _Eager(gm, "EagerGraph")
    else:
        try:
            t1 = time.perf_counter()
            lowered = lowering.lower(gm, [n.data for n in graph.inputs])
            metrics.timing("LoweringTime", time.perf_counter() - t1)
            debug.dump(name, "torch", lowered.torch_mlir)
            debug.dump(name, "linalg", lowered.linalg)
            native = native_compiler()
            if native is None:
                raise RuntimeError(f"the native compiler is not available ({_compiler_import_error})")
            t1 = time.perf_counter()
            options = {"keep_llvm_ir": True} if config.dump_dir else {}
            executable = native.compile_linalg(lowered.linalg, fusion=config.fusion, **options)
            metrics.timing("CompileTime", time.perf_counter() - t1)
            debug.dump(name, "llvm", getattr(executable, "llvm_ir", None))
            specs = {}
            for m, i in zip(metas, lowered.output_map):
                specs.setdefault(i, (tuple(m.shape), m.dtype))
            entry = _Compiled(executable, [specs[i] for i in range(len(specs))], lowered.output_map)
            metrics.counter("UncachedCompile")
        except Exception as e:  # never fail the user: run it eagerly instead
            detail = ""
            if isinstance(e, lowering.LoweringError):
                # Find the ops that cannot lower and run them eagerly from now
                # on, so that the rest of later traces compiles.
                culprits = lowering.find_unsupported(graph)
                for op in culprits:
                    for listener in unsupported_op_listeners:
                        listener(op)
                if culprits:
                    detail = "; from now on these ops run eagerly: " + ", ".join(sorted(map(str, culprits)))
            warnings.warn(
                f"lazymlir: graph {name} ({len(graph.nodes)} ops) failed to compile and runs eagerly{detail}: "
                f"{str(e)[:2000]}",
                RuntimeWarning,
                stacklevel=3,
            )
            entry = _Eager(gm, "CompileFallback")
    seconds = time.perf_counter() - t0
    if config.verbose:
        print(f"lazymlir: compiled graph {name}: {len(graph.nodes)} ops, {len(graph.inputs)} inputs, "
              f"{type(entry).__name__}, {seconds * 1e3:.1f} ms")
    cache.insert(graph.key, entry, seconds)
    return entry


def wait_device_ops() -> None:
    """Block until every graph started by mark_step() has finished.

    Graphs run synchronously today, so this returns at once; code that times
    steps should still call it, as with torch._lazy.wait_device_ops()."""
    return None
