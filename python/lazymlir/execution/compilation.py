"""Compiling a traced graph: the lowering and the native compile, or the
disk cache's record of an earlier process's compile, or a dynamic graph
(``tierup``); what it gives (``entries``: Compiled, Eager, Split) is cached
in memory under the trace's key. ``run.execute`` calls :func:`compile_graph`.
"""

import time
import warnings

import torch

from .. import config, debug, metrics
from .. import dtypes as dtype_table
from ..lowering import linalg, LoweringError
from ..trace import dynamic, ir
from ..trace.template import decompose
from . import aside, cache, donation
from .entries import (
    Compiled,
    compile_linalg_donating,
    compile_lock,
    compile_options,
    configure_disk_cache,
    Eager,
    lowered_graph_listeners,
    note_compile,
    require_native,
    Split,
    unsupported_op_listeners,
)
from .tierup import dynamic_entry


def _note_shapes(graph: ir.Graph, name: str) -> None:
    """Recompiling one graph structure for new input shapes is the recompilation
    storm users of lazy systems dread: it is counted, and reported when it
    repeats (config.recompile_warning_at), naming the dimensions that
    changed. The structure is the trace without its integers (decompose):
    a view to a size that changed with the inputs counts as the same graph."""
    skeleton = decompose(graph.key)[0]
    shapes = tuple(tuple(n.data.shape) for n in graph.inputs)
    seen = cache.shapes_seen(skeleton)
    if seen:
        metrics.counter("RecompileShapeChange")
        last = seen[-1]
        changed = (
            [
                f"input {i} dim {d}: {a} -> {b}"
                for i, (old, new) in enumerate(zip(last, shapes))
                for d, (a, b) in enumerate(zip(old, new))
                if a != b
            ]
            if len(last) == len(shapes)
            else []
        )
        if config.verbose:
            print(f"lazymlir: recompiling graph {name}: {', '.join(changed) or 'constants changed'}")
        if len(seen) + 1 == config.recompile_warning_at:
            warnings.warn(
                f"lazymlir: one graph ({len(graph.nodes)} ops, now {name}) has been compiled for "
                f"{config.recompile_warning_at} different input shapes (last: {', '.join(changed) or 'constants changed'}); "
                "these sizes were not made dynamic (a size of 1, lazymlir.mark_static, LAZYMLIR_DYNAMIC=0, or "
                "constants that do not follow the sizes): pad or bucket the shapes to stop recompiling",
                RuntimeWarning,
                stacklevel=4,
            )
    seen.append(shapes)


def _zero_size(graph: ir.Graph) -> bool:
    metas = [n.data for n in graph.inputs]
    for n in graph.nodes:
        metas.extend(n.meta if isinstance(n.meta, (list, tuple)) else (n.meta,))
    return any(isinstance(m, torch.Tensor) and m.numel() == 0 for m in metas)


def _compiled_entry(native, executable, name, specs, gm, pairs, uses, disk) -> Compiled:
    note_compile(executable.compile_stats, disk)
    for message in native.take_disk_cache_warnings():
        warnings.warn(message, RuntimeWarning, stacklevel=4)
    metrics.sample("KernelCount", executable.kernel_count)
    entry = Compiled(name, executable, specs, gm)
    if pairs:
        entry.donate(pairs, uses)
    metrics.counter("UncachedCompile")
    return entry


def _failed(graph: ir.Graph, name: str, gm, specs, e: Exception):
    """What runs a graph that failed to compile with ``e``: Split when the
    lowering failed on ops found not to lower alone (they run eagerly from
    now on, the rest of later traces compiles), else the graph eagerly, with
    a warning."""
    if isinstance(e, LoweringError):
        culprits = linalg.find_unsupported(graph)
        for key in culprits:
            for listener in unsupported_op_listeners:
                listener(key)
        if culprits:
            warnings.warn(
                f"lazymlir: graph {name} ({len(graph.nodes)} ops) holds ops that do not compile; they run "
                f"eagerly from now on, the rest compiles: "
                f"{', '.join(sorted(f'{op} on {list(dtypes)}' for op, (dtypes, *_) in culprits))}",
                RuntimeWarning,
                stacklevel=4,
            )
            return Split(culprits)
    warnings.warn(
        f"lazymlir: graph {name} ({len(graph.nodes)} ops) failed to compile and runs eagerly: {str(e)[:2000]}",
        RuntimeWarning,
        stacklevel=4,
    )
    return _eager(graph, name, gm, "CompileFallback", specs)


def _eager(graph: ir.Graph, name, gm, counter, specs) -> Eager:
    """An Eager entry that donates what the graph's key offers."""
    entry = Eager(name, gm, counter, specs)
    pairs = ir.donated(graph.key)
    if pairs:
        entry.donate(pairs, donation.input_uses(graph, pairs))
    return entry


def _goes_aside(graph: ir.Graph) -> bool:
    return 0 < config.compile_aside_ops <= len(graph.nodes)


def finish_aside(entry: aside.Pending, graph: ir.Graph):
    """The entry that replaces ``entry`` once its child finished: the
    compiled graph loaded from the disk cache, or what a compile failure
    gives (``_failed``); a graph whose compile cannot be loaded (the disk
    cache evicted it) compiles here."""
    answer = aside.take(entry)
    status = answer["status"]
    if status == "nochild":  # the graph cannot go to a child: compiled here
        return compile_graph(graph, aside_ok=False)
    t0 = time.perf_counter()
    with compile_lock:
        if status == "ok":
            native = require_native()
            disk = configure_disk_cache(native)
            executable = native.load_cached(answer["graph"], **entry.options)
            if executable is None:
                return compile_graph(graph, aside_ok=False)
            pairs = entry.donated if answer["donated"] else ()
            if entry.donated and not pairs:
                metrics.counter("DonationRefused")
            for phase, seconds in answer["seconds"].items():
                metrics.timing("LoweringTime" if phase == "lowering" else "CompileTime", seconds)
            result = _compiled_entry(
                native, executable, entry.name, entry.out_specs, entry.gm, pairs, entry.donated_uses, disk
            )
            metrics.counter("CompiledAside")
            # The eager runs' temporaries, idle in the buffer pool, come in
            # sizes the compiled graph does not ask for: given back, not kept
            # beside what the compiled steps map.
            native.trim_buffer_pool()
        else:
            metrics.counter("CompileAsideFailed")
            error = LoweringError(answer["message"]) if status == "lowering" else RuntimeError(answer["message"])
            result = _failed(graph, entry.name, entry.gm, entry.out_specs, error)
        if type(result) is not Split:
            cache.insert(graph.key, result, time.perf_counter() - t0)
        else:
            cache.remove(graph.key)
    if config.verbose:
        print(f"lazymlir: graph {entry.name} compiled in a child process: {type(result).__name__}")
    return result


def compile_graph(graph: ir.Graph, aside_ok: bool = True):
    """``aside_ok``: a large graph may become an aside.Pending entry (compiled
    in a child process, eager until then)."""
    with compile_lock:
        return _compile_locked(graph, aside_ok)


def _compile_locked(graph: ir.Graph, aside_ok: bool):
    t0 = time.perf_counter()
    gm = ir.to_fx(graph)
    name = ir.graph_hash(graph.key)
    _note_shapes(graph, name)
    entry = None
    specs = graph.output_specs()  # the buffers the outputs are written into
    dtypes = {n.data.dtype for n in graph.inputs} | {dt for _, dt in specs} | {dt for _, dt in graph.scalars}
    if config.force_eager or not dtypes <= dtype_table.SUPPORTED:
        entry = _eager(graph, name, gm, "EagerGraph", specs)
    elif _zero_size(graph):
        # The tracer keeps zero-size tensors out of graphs (fallback._zero_size);
        # compiled loops over an empty dimension divide by it or read past
        # nothing, so one that gets through runs eagerly.
        entry = _eager(graph, name, gm, "ZeroSizeGraph", specs)
    else:
        try:
            native = require_native()
            disk = configure_disk_cache(native)
            options = compile_options()
            plain = not (config.dump_dir or config.profile or lowered_graph_listeners)
            executable = None
            # A trace compiled by an earlier process: its record names the
            # compiled graph on disk (no torch-mlir, no MLIR work). Dumps
            # want the IR, so they always lower.
            # A profiled graph needs its call sites, which only a compile gives.
            # Looked up before the dynamic graphs: a static graph for these
            # very sizes is as fast as code for them gets.
            record = cache.record_key(native, graph.key) if disk and plain else None
            if record is not None:
                found = cache.read_record(native, record)
                if found is not None:
                    executable = native.load_cached(found, **options)
            pairs = ir.donated(graph.key)
            if executable is not None:
                dynamic.note_static(graph)  # the next size generalizes from this one
            elif not pairs:  # a donating graph is static: its runs update inputs in place
                entry = dynamic_entry(graph, native, name, options, disk, plain, t0)
                if entry is not None:
                    return entry
            if executable is None and record is not None and aside_ok and _goes_aside(graph):
                uses = donation.input_uses(graph, pairs) if pairs else None
                metas = [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in graph.input_values()]
                entry = aside.Pending(name, gm, specs, len(graph.nodes), metas, options, pairs, uses, record)
            elif executable is None:
                t1 = time.perf_counter()
                lowered = linalg.lower(gm, graph.input_values(), origins=config.profile)
                metrics.timing("LoweringTime", time.perf_counter() - t1)
                t1 = time.perf_counter()
                if config.dump_dir:  # before compiling: what a compiler crash was given
                    debug.dump(name, "torch", lowered.torch_mlir)
                    debug.dump(name, "linalg", lowered.linalg)
                for listener in lowered_graph_listeners:
                    listener(name, graph, lowered.linalg)
                try:
                    requested = pairs
                    executable, pairs = compile_linalg_donating(native, lowered.linalg, options, pairs)
                    if requested and not pairs:  # refused: copy semantics, no record under the donating key
                        record = None
                except Exception:
                    # The IR that failed, for the bug report.
                    debug.dump(name, "torch", lowered.torch_mlir)
                    debug.dump(name, "linalg", lowered.linalg)
                    raise
                metrics.timing("CompileTime", time.perf_counter() - t1)
                if record is not None:
                    cache.write_record(native, record, executable.cache_key)
                if config.dump_dir:
                    kernels = executable.kernel_count
                    debug.dump(name, "torch", lowered.torch_mlir, kernels)
                    debug.dump(name, "linalg", lowered.linalg, kernels)
                    debug.dump(name, "llvm", executable.llvm_dialect, kernels)
            if entry is None:
                uses = donation.input_uses(graph, pairs) if pairs else None
                entry = _compiled_entry(native, executable, name, specs, gm, pairs, uses, disk)
        except Exception as e:  # never fail the user: run it eagerly instead
            entry = _failed(graph, name, gm, specs, e)
            if type(entry) is Split:
                return entry
    seconds = time.perf_counter() - t0
    if config.verbose:
        kernels = f", {entry.kernel_count} kernels" if entry.kernel_count is not None else ""
        detail = ""
        if type(entry) is Compiled:
            st = entry.executable.compile_stats
            if st["from_disk"]:
                detail = f" [from the disk cache: {st['distinct_kernels']} kernels, link {st['link'] * 1e3:.0f} ms]"
            else:
                phases = ", ".join(
                    f"{name[len('Compile') : -len('Time')]} {st[k] * 1e3:.0f}"
                    for k, name in metrics.COMPILE_PHASES.items()
                )
                detail = (
                    f" [{st['input_ops']} linalg ops, {st['loop_nests']} loop nests, {st['distinct_kernels']} "
                    f"distinct kernels: {st['kernels_compiled']} compiled, {st['kernels_reused']} reused, "
                    f"{st['kernels_from_disk']} from disk; {st['llvm_instructions']} LLVM instructions, "
                    f"{st['object_bytes']} object bytes; ms: {phases}]"
                )
        print(
            f"lazymlir: compiled graph {name}: {len(graph.nodes)} ops, {len(graph.inputs)} inputs, "
            f"{type(entry).__name__}{kernels}, {seconds * 1e3:.1f} ms{detail}"
        )
    cache.insert(graph.key, entry, seconds)
    return entry
