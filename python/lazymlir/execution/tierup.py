"""A trace's graphs beyond the one compiled for it: dynamic graphs (one
compiled graph for every size of a structure, from templates or the disk
cache; lazymlir.trace.dynamic finds the symbols) and the static tier-up of
a dynamic graph's sizes that keep coming back (compiled on a background
thread)."""

import json
import re
import time

import torch

from .. import config, debug, metrics
from ..lowering import linalg, LoweringError
from ..trace import dynamic, ir
from ..trace.template import decompose, fx_rewriter, Misaligned
from . import cache
from .entries import (
    Compiled,
    compile_lock,
    compile_options,
    configure_disk_cache,
    lowered_graph_listeners,
    native_compiler,
    note_compile,
)


# Static graphs for sizes that keep coming back. A dynamic graph serves every
# size of its structure, but code for known sizes is faster (whole tiles,
# epilogues fused into convolutions, streaming stores): an instance (one set
# of sizes) that has run config.static_tier_up_runs times gets its own static
# graph, compiled on a background thread; its runs switch to it when it is
# ready (the memory cache's entry for its key), and the disk cache keeps it.
_instance_runs: dict = {}
_INSTANCES_MAX = 4096
_static_jobs: list = []
_static_pool = None
_static_generation = 0  # cache.clear() between scheduling and the end drops the result


def note_dynamic_run(graph: ir.Graph, entry: "Compiled") -> None:
    """A run of the dynamic graph ``entry`` at ``graph``'s sizes. A size gets
    its static graph once it has run config.static_tier_up_runs times and
    makes at least a quarter of the dynamic graph's runs: a training loop's
    batch size does, a decode loop's cache lengths (each once per generate
    call) never do, which would compile a graph per length."""
    metrics.counter("DynamicGraphRun")
    runs_needed = config.static_tier_up_runs
    if runs_needed <= 0:
        return
    entry.runs += 1
    key = graph.key
    runs = _instance_runs.get(key, 0)
    if runs < 0:  # scheduled
        return
    runs += 1
    if len(_instance_runs) >= _INSTANCES_MAX:
        _instance_runs.clear()  # random sizes forever: bounded, and each restarts its count
    if runs >= runs_needed and runs * 4 >= entry.runs:
        _instance_runs[key] = -1
        _schedule_static(graph)
    else:
        _instance_runs[key] = runs


def _schedule_static(graph: ir.Graph) -> None:
    global _static_pool
    import concurrent.futures

    if _static_pool is None:
        _static_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lazymlir-static")
    # What the compile needs, taken now: the trace's nodes are released once
    # it has run. The inputs are only looked at for their metadata.
    job = (
        graph.key,
        ir.graph_hash(graph.key),
        ir.to_fx(graph),
        graph.input_values(),
        graph.output_specs(),
        compile_options(),
        _static_generation,
    )
    _static_jobs.append(_static_pool.submit(_compile_static, *job))
    del _static_jobs[:-64]


def _compile_static(key, name, gm, inputs, specs, options, generation) -> None:
    t0 = time.perf_counter()
    try:
        with compile_lock:
            native = native_compiler()
            disk = configure_disk_cache(native)
            with linalg.private_fx_tracing():  # off the main thread
                lowered = linalg.lower(gm, inputs)
            executable = native.compile_linalg(lowered.linalg, **options)
            if disk:
                record = cache.record_key(native, key)
                if record is not None:
                    cache.write_record(native, record, executable.cache_key)
    except Exception as e:  # the dynamic graph goes on serving this size
        metrics.counter("StaticTierUpFailed")
        if config.verbose:
            print(f"lazymlir: static graph {name} for a dynamic graph's sizes failed to compile: {e}")
        return
    if generation != _static_generation:
        return
    cache.insert(key, Compiled(name, executable, specs, gm), time.perf_counter() - t0)
    metrics.counter("StaticTierUp")
    if config.verbose:
        print(
            f"lazymlir: static graph {name} replaces the dynamic graph at its sizes "
            f"({(time.perf_counter() - t0) * 1e3:.0f} ms, in the background)"
        )


def wait_static_compiles() -> None:
    """Block until every scheduled static tier-up has finished."""
    for job in list(_static_jobs):
        job.result()


def forget_static_compiles() -> None:
    """cache.clear(): run counts restart, compiles under way are dropped."""
    global _static_generation
    _static_generation += 1
    _instance_runs.clear()


def _wait_native_background_compiles() -> None:
    native = native_compiler()
    if native is not None:
        native.wait_background_compiles()


cache.on_clear(forget_static_compiles)
cache.on_clear(dynamic.clear)
cache.on_wait_background_compiles(wait_static_compiles)
cache.on_wait_background_compiles(_wait_native_background_compiles)


def dynamic_entry(graph, native, name, options, disk, plain, t0):
    """A dynamic graph for this trace, cached under its key, or None: one an
    earlier process compiled for its structure (the disk cache keeps them by
    skeleton: no compile at all), or, for a trace like one compiled before
    with sizes changed, one compiled now for every size of them, if it can
    be (lazymlir.trace.dynamic)."""
    if disk and plain:
        entry = dynamic.lookup(graph, _disk_templates(native, name, options))
        if entry is not None:
            metrics.counter("UncachedCompile")
            cache.insert(graph.key, entry, time.perf_counter() - t0)
            return entry
    template = dynamic.generalize(graph) if not lowered_graph_listeners else None
    if template is None:
        return None
    entry = _compile_dynamic(graph, template, native, name, options, disk)
    if entry is None:
        return None
    if disk and plain and entry.executable.cache_key:
        loader, read = _disk_templates(native, name, options)
        dynamic.save(graph, template, read, lambda sk, records: _write_templates(native, sk, records))
    cache.insert(graph.key, entry, time.perf_counter() - t0)
    return entry


def _dynamic_dims(graph: ir.Graph, template) -> list:
    """For each argument of the graph (the leaves' buffers, then the lifted
    scalars), the dimensions that are symbols."""
    dims = []
    perms = graph.input_perms or [None] * len(graph.inputs)
    for logical, perm in zip(template.dynamic_dims(len(graph.inputs)), perms):
        dims.append(logical if perm is None else {q for q, d in enumerate(perm) if d in logical})
    return dims + [set() for _ in graph.scalars] + [{0} for _ in template.free]


def _templates_key(native, skeleton):
    return cache.record_key(native, ("dynamic-templates", skeleton))


def _write_templates(native, skeleton, records) -> None:
    key = _templates_key(native, skeleton)
    if key is not None:
        native.disk_cache_write(key, json.dumps(records).encode())


def _disk_templates(native, name: str, options: dict):
    """(load, read) for dynamic.lookup: the dynamic graphs an earlier
    process compiled for a skeleton, from the disk cache."""

    def read(skeleton):
        key = _templates_key(native, skeleton)
        payload = native.disk_cache_read(key) if key is not None else None
        if payload is None:
            return None
        try:
            records = json.loads(payload.decode())
        except ValueError:
            return None
        return records if isinstance(records, list) else None

    def load(template, graph):
        executable = native.load_cached(template.graph_key, **options)
        if executable is None or not executable.is_dynamic:
            return None
        note_compile(executable.compile_stats, True)
        rewrite = fx_rewriter(template, graph)
        try:
            gm = ir.to_fx(graph, rewrite, len(template.free))
            rewrite.check()
        except Misaligned:
            return None
        entry = Compiled(_dynamic_name(graph, template), executable, None, gm)
        entry.template = template
        entry.validate = not _divides_integers(graph)
        return entry

    return load, read


def _dynamic_name(graph: ir.Graph, template) -> str:
    """A dynamic graph's name (dumps, profiles): of the trace's structure and
    its symbols, not of its sizes."""
    return ir.graph_hash((decompose(graph.key)[0], sorted(template.symbols), sorted(template.exprs.items())))


_TENSOR_CAST = re.compile(r"tensor\.cast [^:]*: tensor<([^>]*)> to tensor<([^>]*)>")


def refined_dynamic_dims(linalg: str):
    """The first tensor.cast in ``linalg`` that gives a ``?`` dimension a
    static size, or None. torch-mlir's view lowering emits such casts for a
    view that merges two ``?`` dimensions (``[?, ?, 64] -> [? * ?, 64]``
    became ``tensor.cast ?x?x64 to ?x1x64``): an assumption nothing checks,
    wrong for every other size. A dynamic graph with one compiles static."""
    for m in _TENSOR_CAST.finditer(linalg):
        src, dst = m.group(1).split("x")[:-1], m.group(2).split("x")[:-1]
        if len(src) == len(dst) and any(a == "?" and b != "?" for a, b in zip(src, dst)):
            return m.group(0)
    return None


def _compile_dynamic(graph: ir.Graph, template, native, name: str, options: dict, disk: bool):
    """The template's graph compiled with its symbols ``?``: a Compiled, or
    None when that fails (the caller compiles the trace static). Named (dumps,
    profiles) by the trace's structure and its symbols, not by its sizes."""
    name = _dynamic_name(graph, template)
    try:
        t1 = time.perf_counter()
        rewrite = fx_rewriter(template, graph)
        gm = ir.to_fx(graph, rewrite, len(template.free))
        rewrite.check()
        inputs = graph.input_values() + template.phantoms(decompose(graph.key)[1])
        lowered = linalg.lower(gm, inputs, origins=config.profile, dynamic=_dynamic_dims(graph, template))
        metrics.timing("LoweringTime", time.perf_counter() - t1)
        if config.dump_dir:
            debug.dump(name, "torch", lowered.torch_mlir)
            debug.dump(name, "linalg", lowered.linalg)
        refined = refined_dynamic_dims(lowered.linalg)
        if refined:
            raise LoweringError(f"torch-mlir assumed a ? size static: {refined}")
        t1 = time.perf_counter()
        executable = native.compile_linalg(
            lowered.linalg, keep_llvm_dialect=bool(config.dump_dir), profile=config.profile, **options
        )
        metrics.timing("CompileTime", time.perf_counter() - t1)
    except Exception as e:
        template.failed = True
        metrics.counter("DynamicCompileFallback")
        if config.verbose:
            print(f"lazymlir: graph {name} compiles static: dynamic in {template.describe()} failed: {str(e)[:500]}")
        return None
    if config.dump_dir:
        debug.dump(name, "llvm", executable.llvm_dialect, executable.kernel_count)
    template.guards = lowered.guards
    template.output_sizes, template.size_symbols = lowered.output_sizes, lowered.symbols
    if template.output_sizes is None or not template.outputs_match(inputs, graph.output_specs()):
        # The compiled graph's outputs cannot be checked (or differ from this
        # very trace's): never run it.
        template.failed = True
        metrics.counter("DynamicCompileFallback")
        return None
    note_compile(executable.compile_stats, disk)
    metrics.sample("KernelCount", executable.kernel_count)
    metrics.counter("DynamicCompile")
    metrics.counter("UncachedCompile")
    entry = Compiled(name, executable, None if executable.is_dynamic else graph.output_specs(), gm)
    entry.template = template
    # Eager integer division traps (SIGFPE) on INT64_MIN / -1, which the
    # compiled code wraps: such graphs are not compared with eager.
    entry.validate = not _divides_integers(graph)
    template.entry = entry
    if config.verbose:
        print(f"lazymlir: graph {name} compiled with dynamic {template.describe()}")
    return entry


_INTEGER_DIVISIONS = ("div", "floor_divide", "fmod", "remainder")


def _divides_integers(graph: ir.Graph) -> bool:
    for n in graph.nodes:
        name = n.sig[0] if isinstance(n.sig[0], str) else ""
        if (
            any(d in name for d in _INTEGER_DIVISIONS)
            and isinstance(n.meta, torch.Tensor)
            and not (n.meta.dtype.is_floating_point or n.meta.dtype.is_complex)
        ):
            return True
    return False
