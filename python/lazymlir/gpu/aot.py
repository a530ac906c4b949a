"""Ahead-of-time compilation for the NVVM GPU target, on a machine without a
GPU: trace a step on the lazy device (it runs, compiled for this CPU, so its
results are real) and compile every graph it records for an NVIDIA chip into
one bundle (lazymlir.gpu.launch's format: versioned, checksummed, per graph
its launch plan with the kernels' PTX).

    bundle = lazymlir.gpu.aot.compile_step(step, x, y, chip="sm_90", path="step.lzgpu")

or from the command line, with a function that returns ``(step, args)``:

    python -m lazymlir.gpu.aot my_module:make_step --chip sm_90 -o step.lzgpu

Each graph is keyed by its trace's name (the hash of the recorded ops,
shapes and dtypes: what the lazy device computes for the same step on the
GPU machine) and records how many of its buffers are inputs (the trace's
device data, then its lifted scalars as 0-d tensors); the rest are its
outputs, written in place.
"""

import argparse
import importlib
import sys
from typing import Callable, Dict, List, NamedTuple

import torch

from ..execution import cache as _cache
from ..execution import entries, native
from ..frontend.barriers import mark_step
from ..trace.ir import to_fx
from . import launch


class TracedGraph(NamedTuple):
    fx: torch.fx.GraphModule  # its aten ops on CPU tensors (lazymlir.trace.ir.to_fx)
    inputs: List[torch.Tensor]  # the buffers it was given (device data, then lifted scalars)
    linalg: str  # linalg-on-tensors text


def trace_step(step: Callable, *args, steps: int = 1) -> Dict[str, TracedGraph]:
    """Runs ``step(*args)`` ``steps`` times on the lazy device (each followed
    by mark_step; what it returns and what it updates is computed): every
    graph it records, by name. The in-memory graph cache is cleared first, so
    that every graph of the step is lowered (and later steps compile again,
    or load from the disk cache)."""
    recorded: Dict[str, TracedGraph] = {}

    def capture(name, graph, linalg):
        if name not in recorded:
            recorded[name] = TracedGraph(to_fx(graph), [t.clone() for t in graph.input_values()], linalg)

    _cache.clear()  # every graph of the step is lowered again, and seen
    entries.lowered_graph_listeners.append(capture)
    try:
        for _ in range(steps):
            result = step(*args)  # held: mark_step computes what is still alive
            mark_step()
            del result
    finally:
        entries.lowered_graph_listeners.remove(capture)
    if not recorded:
        raise RuntimeError("lazymlir: the step recorded no graph for the lazy device (are its tensors on 'lazy'?)")
    return recorded


def compile_graphs(recorded: Dict[str, TracedGraph], chip: str = "sm_90", libdevice: str = "") -> Dict[str, dict]:
    """Every graph of :func:`trace_step` compiled for ``chip``: a dict of
    graph name -> launch plan (plus ``"inputs"``: the number of its buffers
    that are inputs). A graph the GPU compiler rejects raises its
    CompileError (AOT must not ship a bundle with holes)."""
    graphs: Dict[str, dict] = {}
    errors = []
    for name, traced in recorded.items():
        try:
            plan = native.compile_gpu(traced.linalg, chip, libdevice=libdevice)
        except native.CompileError as e:
            errors.append((name, e))
            continue
        plan["inputs"] = len(traced.inputs)
        graphs[name] = plan
    if errors:
        name, error = errors[0]
        raise native.CompileError(
            f"lazymlir: graph {name} does not compile for {chip} "
            f"({len(errors)} of {len(recorded)} graphs fail): {error}"
        )
    return graphs


def compile_step(
    step: Callable, *args, chip: str = "sm_90", path: str = None, steps: int = 1, libdevice: str = ""
) -> Dict[str, dict]:
    """:func:`trace_step` then :func:`compile_graphs`: the step's graphs'
    launch plans for ``chip``, also saved as a bundle at ``path`` when
    given."""
    graphs = compile_graphs(trace_step(step, *args, steps=steps), chip, libdevice)
    if path:
        launch.save_bundle(path, graphs, chip, producer=f"lazymlir.gpu.aot {native.code_identity()[:16]}")
    return graphs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lazymlir.gpu.aot", description=__doc__.split("\n\n")[0])
    parser.add_argument("factory", help="MODULE:FUNCTION returning (step, args); the args are moved to 'lazy'")
    parser.add_argument("--chip", default="sm_90", help="NVIDIA architecture (sm_80, sm_90, ...)")
    parser.add_argument("-o", "--output", required=True, help="the bundle to write")
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        help="steps to trace (a second one records the graphs of a step after the first optimizer update)",
    )
    options = parser.parse_args(argv)
    module_name, _, function_name = options.factory.partition(":")
    if not function_name:
        parser.error("the factory is MODULE:FUNCTION")
    step, args = getattr(importlib.import_module(module_name), function_name)()
    args = [a.to("lazy") if hasattr(a, "to") else a for a in args]
    graphs = compile_step(step, *args, chip=options.chip, path=options.output, steps=options.steps)
    kernels = sum(len(plan["modules"]) for plan in graphs.values())
    print(f"lazymlir.gpu.aot: {len(graphs)} graphs, {kernels} kernels for {options.chip} -> {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
