"""Compiling a traced graph: the native compiler loaded at the first compile,
the lowering and the native compile (or the disk cache), and what a compiled
graph becomes: a :class:`_Compiled` executable, an :class:`_Eager` FX graph run
op by op (a graph that cannot compile, with the reason as a counter), or a
:class:`_Split` (ops that do not lower, computed eagerly first). The runtime
(``runtime.execute``) caches and runs them.
"""

import atexit
import json
import re
import threading
import time
import warnings
from typing import Callable, List

import torch

from . import cache, config, debug, decompositions, dynamic, lowering, metrics, trace
from . import dtypes as dtype_table

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
            # The background compiler stops before the interpreter (and the
            # C++ runtime) shuts down.
            atexit.register(compiler.stop_background_compiles)
        except ImportError as e:
            _compiler_import_error = str(e)
    return _compiler


def _prewarm() -> None:
    """Imports the first compilation needs (torch-mlir alone takes ~0.8 s) and
    builds the decomposition table, while the user builds a model and traces
    the first step. The native module (libMLIR) loads at the first compile
    (0.04 s): the tracer and eager execution never need it. Not a daemon thread: the interpreter waits for it at exit
    instead of killing it inside an extension's initialization."""
    try:
        import torch_mlir.compiler_utils  # noqa: F401
        import torch_mlir.fx  # noqa: F401

        decompositions.decomposition_table()
    except Exception:  # the first compile reports it
        pass


if not config.force_eager:
    threading.Thread(target=_prewarm, name="lazymlir-prewarm").start()


class _Compiled:
    """A graph compiled by the native compiler: its executable (a
    ``lazymlir._native.CpuExecutable``) and the buffers its results go in."""

    __slots__ = ("name", "executable", "out_specs", "checked", "gm", "dynamic", "template", "validate", "wrong", "runs")

    def __init__(self, name, executable, out_specs, gm):
        self.name = name  # the graph's hash (dumps, the profiler)
        self.executable = executable
        # (shape, dtype) of each result; None for a dynamic graph, whose
        # results' shapes are each trace's (trace.Graph.output_specs).
        self.out_specs = out_specs
        self.dynamic = executable.is_dynamic
        # A dynamic graph's lazymlir.dynamic.Template (its phantom inputs).
        self.template = None
        # The first run checks every buffer's dtype, shape and layout; the
        # cache key fixes them for the runs after it, which check sizes only.
        self.checked = False
        # The FX graph, run eagerly when a runtime check of the compiled code
        # fails (an index out of range, an integer division by zero).
        self.gm = gm
        # Set on a dynamic graph (_compile_dynamic, the disk loader): its
        # first run is compared with the FX graph run eagerly (_validated);
        # one that differed runs eagerly for ever.
        self.validate = False
        self.wrong = False
        self.runs = 0  # a dynamic graph's runs, all sizes (note_dynamic_run)

    @property
    def kernel_count(self) -> int:
        return self.executable.kernel_count

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        """The native run releases the GIL; ``background``: on the worker."""
        t0 = time.perf_counter()
        exe = self.executable
        if self.wrong:
            _run_fx(self.gm, inputs, outs)
            metrics.timing("ExecuteTime", time.perf_counter() - t0)
            return
        try:
            if self.checked:
                _compiler.run_allocated(exe, inputs, outs, background=background, dynamic=self.dynamic)
            else:
                exe.run(inputs, outs, background=background)
                self.checked = True
            check_failed = False
        except _compiler.CheckFailed:
            self.checked = True  # the buffers were fine
            check_failed = True
        if check_failed:
            # The compiled code stayed in bounds but its outputs are garbage.
            # Eager raises its own error (IndexError "index out of range in
            # self", ...), which becomes the job's; if it does not (a check
            # that failed needlessly), its outputs are the result.
            metrics.counter("RuntimeCheckEagerRerun")
            _run_fx(self.gm, inputs, outs)
        elif self.validate:
            self.validate = False
            self._validated(inputs, outs)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)

    def _validated(self, inputs: List[torch.Tensor], outs: List[torch.Tensor]) -> None:
        """A dynamic graph's first results against its FX graph run eagerly on
        the same inputs. torch-mlir's lowerings have assumed a ``?`` size to
        be 1 where they could not prove two sizes equal (a view merging two
        ``?`` dimensions, an index_put with a 2-D ``?`` index): code wrong for
        almost every size, which only a run shows. On a difference, the
        outputs become eager's, this graph runs eagerly from now on and its
        template is dropped (later sizes compile static), with a warning."""
        try:
            with torch.no_grad(), torch.autocast("cpu", enabled=False):
                expected = self.gm(*inputs)
        except Exception:
            return  # eager refuses these inputs (the runtime checks cover what the compiled code did)
        try:
            bad = [i for i, (out, ref) in enumerate(zip(outs, expected)) if not _close(out, ref)]
            if not bad or not _worse_than_eager(self.gm, inputs, outs, expected, bad):
                return
            detail = _difference(outs[bad[0]], expected[bad[0]])
        except Exception as e:  # a comparison this code does not know (an exotic dtype): not judged
            metrics.counter("DynamicValidationSkipped")
            if config.verbose:
                print(f"lazymlir: dynamic graph {self.name} not compared with eager: {e}")
            return
        self.wrong = True
        if self.template is not None:
            self.template.failed = True
        metrics.counter("DynamicValidationMismatch")
        warnings.warn(
            f"lazymlir: dynamic graph {self.name} computed output(s) {bad} unlike eager on its first "
            f"run (#{bad[0]}: {detail}): it runs eagerly from now on, and later sizes compile static",
            RuntimeWarning,
        )
        for out, ref in zip(outs, expected):
            out.copy_(ref)


def _worse_than_eager(gm, inputs, outs, expected, bad) -> bool:
    """Whether outputs ``bad`` of a compiled run (``outs``) are further from
    the graph computed in float64 than eager's float32 results
    (``expected``) are, by more than rounding explains: an output that is
    cancellation noise (a gradient that is zero in exact arithmetic, such as
    attention's key bias) differs from eager's by as much as it is large,
    and is no worse. True when float64 cannot tell (a graph that fails in
    float64, outputs that are not floats)."""
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            truth = gm(*[t.double() if t.is_floating_point() else t for t in inputs])
    except Exception:
        return True
    for i in bad:
        out, ref, exact = outs[i], expected[i], truth[i]
        if ref.is_complex() and out.is_complex() and exact.is_complex():
            out, ref, exact = (torch.view_as_real(t.resolve_conj()) for t in (out, ref, exact))
        if not ref.is_floating_point() or out.shape != ref.shape or exact.shape != ref.shape:
            return True
        out, ref, exact = out.double(), ref.double(), exact.double()
        finite = torch.isfinite(ref)
        if not torch.equal(finite, torch.isfinite(out)):
            return True
        if finite.any():
            ours = (out[finite] - exact[finite]).abs().max().item()
            eager = (ref[finite] - exact[finite]).abs().max().item()
            if not ours <= 10 * eager + 1e-5 * exact[finite].abs().max().item():
                return True
    return False


def _difference(out: torch.Tensor, ref: torch.Tensor) -> str:
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)}, eager {tuple(ref.shape)}"
    if ref.is_complex():
        out, ref = torch.view_as_real(out.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    if not (ref.dtype.is_floating_point or ref.is_complex()):
        return f"{ref.dtype} {tuple(ref.shape)}, {int((out != ref).sum())} elements differ"
    d = (out.double() - ref.double()).abs().nan_to_num(float("inf"))
    return (
        f"{ref.dtype} {tuple(ref.shape)}, largest difference {d.max().item():.3g} where eager has "
        f"{ref.flatten()[d.flatten().argmax()].item():.3g}, largest eager value {ref.abs().max().item():.3g}"
    )


def _close(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Compiled against eager: floats within rounding (reassociated sums,
    approximated math) relative to each element and to the output's scale;
    NaNs and infinities in the same places; other dtypes equal."""
    if out.shape != ref.shape:
        return False
    if ref.is_complex():
        out, ref = torch.view_as_real(out.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    if not ref.dtype.is_floating_point:
        return bool(torch.equal(out, ref.to(out.dtype)))
    a, b = out.double(), ref.double()
    finite = torch.isfinite(b)
    if not torch.equal(finite, torch.isfinite(a)) or not torch.equal(a[~finite].nan_to_num(), b[~finite].nan_to_num()):
        return False
    if not finite.any():
        return True
    a, b = a[finite], b[finite]
    rtol = 1e-3 if ref.dtype in (torch.float32, torch.float64) else 3e-2
    scale = b.abs().max().item()
    return bool(((a - b).abs() <= rtol * b.abs() + rtol * scale + 1e-6).all())


def _run_fx(gm, inputs: List[torch.Tensor], outs: List[torch.Tensor]) -> None:
    """Run a graph's FX module eagerly, its i-th result copied into outs[i].
    Grad mode and autocast are per thread: on the worker they are off; a
    waiting thread that runs the graph itself (runtime._wait_for) may be
    inside torch.autocast, which would change the recorded dtypes."""
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for out, r in zip(outs, gm(*inputs)):
            out.copy_(r)


class _Eager:
    """A graph run op by op on CPU; ``counter`` says why (for the metrics)."""

    __slots__ = ("name", "gm", "counter", "out_specs")
    kernel_count = None

    def __init__(self, name, gm, counter, out_specs):
        self.name = name
        self.gm = gm
        self.counter = counter
        self.out_specs = out_specs

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        t0 = time.perf_counter()
        _run_fx(self.gm, inputs, outs)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)


# Called with the (op, input dtypes) of each op found not to lower alone
# (ops.py makes it run eagerly for those dtypes).
unsupported_op_listeners: List[Callable] = []

# Called with (graph name, trace.Graph, linalg text) for each graph lowered
# for the native compiler (lazymlir.aot compiles them for a GPU too); while
# any is registered, graphs are lowered even when the disk cache holds them.
lowered_graph_listeners: List[Callable] = []


class _Split:
    """What _compile returns for a graph that holds ops that do not lower
    alone (found by lowering.find_unsupported); not cached."""

    __slots__ = ("ops",)

    def __init__(self, ops):
        self.ops = ops


def _note_shapes(graph: trace.Graph, name: str) -> None:
    """Recompiling one graph structure for new input shapes is the recompilation
    storm users of lazy systems dread: it is counted, and reported when it
    repeats (config.recompile_warning_at), naming the dimensions that
    changed. The structure is the trace without its integers (dynamic.decompose):
    a view to a size that changed with the inputs counts as the same graph."""
    skeleton = dynamic.decompose(graph.key)[0]
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


def note_dynamic_run(graph: trace.Graph, entry: "_Compiled") -> None:
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


def _schedule_static(graph: trace.Graph) -> None:
    global _static_pool
    import concurrent.futures

    if _static_pool is None:
        _static_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lazymlir-static")
    # What the compile needs, taken now: the trace's nodes are released once
    # it has run. The inputs are only looked at for their metadata.
    job = (
        graph.key,
        trace.graph_hash(graph.key),
        trace.to_fx(graph),
        graph.input_values(),
        graph.output_specs(),
        _options(),
        _static_generation,
    )
    _static_jobs.append(_static_pool.submit(_compile_static, *job))
    del _static_jobs[:-64]


def _compile_static(key, name, gm, inputs, specs, options, generation) -> None:
    t0 = time.perf_counter()
    try:
        with _compile_lock:
            native = native_compiler()
            disk = _configure_disk_cache(native)
            with lowering.private_fx_tracing():  # off the main thread
                lowered = lowering.lower(gm, inputs)
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
    cache.insert(key, _Compiled(name, executable, specs, gm), time.perf_counter() - t0)
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


def _dynamic_entry(graph, native, name, options, disk, plain, t0):
    """A dynamic graph for this trace, cached under its key, or None: one an
    earlier process compiled for its structure (the disk cache keeps them by
    skeleton: no compile at all), or, for a trace like one compiled before
    with sizes changed, one compiled now for every size of them, if it can
    be (lazymlir.dynamic)."""
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


def _dynamic_dims(graph: trace.Graph, template) -> list:
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
        _note_compile(executable.compile_stats, True)
        rewrite = dynamic.fx_rewriter(template, graph)
        try:
            gm = trace.to_fx(graph, rewrite, len(template.free))
            rewrite.check()
        except dynamic.Misaligned:
            return None
        entry = _Compiled(_dynamic_name(graph, template), executable, None, gm)
        entry.template = template
        entry.validate = not _divides_integers(graph)
        return entry

    return load, read


def _dynamic_name(graph: trace.Graph, template) -> str:
    """A dynamic graph's name (dumps, profiles): of the trace's structure and
    its symbols, not of its sizes."""
    return trace.graph_hash((dynamic.decompose(graph.key)[0], sorted(template.symbols), sorted(template.exprs.items())))


_TENSOR_CAST = re.compile(r"tensor\.cast [^:]*: tensor<([^>]*)> to tensor<([^>]*)>")


def _refined_dynamic_dims(linalg: str):
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


def _compile_dynamic(graph: trace.Graph, template, native, name: str, options: dict, disk: bool):
    """The template's graph compiled with its symbols ``?``: a _Compiled, or
    None when that fails (the caller compiles the trace static). Named (dumps,
    profiles) by the trace's structure and its symbols, not by its sizes."""
    name = _dynamic_name(graph, template)
    try:
        t1 = time.perf_counter()
        rewrite = dynamic.fx_rewriter(template, graph)
        gm = trace.to_fx(graph, rewrite, len(template.free))
        rewrite.check()
        inputs = graph.input_values() + template.phantoms(dynamic.decompose(graph.key)[1])
        lowered = lowering.lower(gm, inputs, origins=config.profile, dynamic=_dynamic_dims(graph, template))
        metrics.timing("LoweringTime", time.perf_counter() - t1)
        if config.dump_dir:
            debug.dump(name, "torch", lowered.torch_mlir)
            debug.dump(name, "linalg", lowered.linalg)
        refined = _refined_dynamic_dims(lowered.linalg)
        if refined:
            raise lowering.LoweringError(f"torch-mlir assumed a ? size static: {refined}")
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
    _note_compile(executable.compile_stats, disk)
    metrics.sample("KernelCount", executable.kernel_count)
    metrics.counter("DynamicCompile")
    metrics.counter("UncachedCompile")
    entry = _Compiled(name, executable, None if executable.is_dynamic else graph.output_specs(), gm)
    entry.template = template
    # Eager integer division traps (SIGFPE) on INT64_MIN / -1, which the
    # compiled code wraps: such graphs are not compared with eager.
    entry.validate = not _divides_integers(graph)
    template.entry = entry
    if config.verbose:
        print(f"lazymlir: graph {name} compiled with dynamic {template.describe()}")
    return entry


_INTEGER_DIVISIONS = ("div", "floor_divide", "fmod", "remainder")


def _divides_integers(graph: trace.Graph) -> bool:
    for n in graph.nodes:
        name = n.sig[0] if isinstance(n.sig[0], str) else ""
        if (
            any(d in name for d in _INTEGER_DIVISIONS)
            and isinstance(n.meta, torch.Tensor)
            and not (n.meta.dtype.is_floating_point or n.meta.dtype.is_complex)
        ):
            return True
    return False


def _zero_size(graph: trace.Graph) -> bool:
    metas = [n.data for n in graph.inputs]
    for n in graph.nodes:
        metas.extend(n.meta if isinstance(n.meta, (list, tuple)) else (n.meta,))
    return any(isinstance(m, torch.Tensor) and m.numel() == 0 for m in metas)


def _note_compile(stats: dict, disk: bool) -> None:
    """Metrics of one native compile (or disk cache load)."""
    if stats["from_disk"]:
        metrics.counter("DiskCacheHit")
        metrics.timing("DiskCacheLoadTime", stats["total"])
        for key in ("distinct_kernels", "kernels_reused", "kernels_from_disk"):
            metrics.sample(metrics.COMPILE_SIZES[key], stats[key])
    else:
        if disk:
            metrics.counter("DiskCacheMiss")
        for key, name in metrics.COMPILE_PHASES.items():
            metrics.timing(name, stats[key])
        for key, name in metrics.COMPILE_SIZES.items():
            metrics.sample(name, stats[key])
    if disk:
        cache.note_disk(stats["from_disk"])


# The disk cache configuration the native compiler was given last.
_disk_config = None


def _configure_disk_cache(native) -> bool:
    """Gives the native compiler the current disk cache settings (they may
    change with config.patch); whether the disk cache is on."""
    global _disk_config
    wanted = (config.cache_dir or "", config.cache_max_bytes)
    if wanted != _disk_config:
        native.configure_disk_cache(*wanted)
        _disk_config = wanted
    return bool(wanted[0])


def _options() -> dict:
    """The native compiler's options for a graph compiled now."""
    return dict(
        fusion=config.fusion,
        channels_last=config.channels_last,
        threads=config.threads,
        parallel_threshold=config.parallel_threshold,
        streaming_store_bytes=config.streaming_store_bytes,
        tiered=config.tiered,
        tier_up_runs=config.tier_up_runs,
    )


# torch-mlir and the native compiler work for one graph at a time: the
# tracing thread's compiles and the static tier-up thread's.
_compile_lock = threading.RLock()


def _compile(graph: trace.Graph):
    with _compile_lock:
        return _compile_locked(graph)


def _compile_locked(graph: trace.Graph):
    t0 = time.perf_counter()
    gm = trace.to_fx(graph)
    name = trace.graph_hash(graph.key)
    _note_shapes(graph, name)
    entry = None
    specs = graph.output_specs()  # the buffers the outputs are written into
    dtypes = {n.data.dtype for n in graph.inputs} | {dt for _, dt in specs} | {dt for _, dt in graph.scalars}
    if config.force_eager:
        entry = _Eager(name, gm, "EagerGraph", specs)
    elif not dtypes <= dtype_table.SUPPORTED:
        entry = _Eager(name, gm, "EagerGraph", specs)
    elif _zero_size(graph):
        # The tracer keeps zero-size tensors out of graphs (fallback._zero_size);
        # compiled loops over an empty dimension divide by it or read past
        # nothing, so one that gets through runs eagerly.
        entry = _Eager(name, gm, "ZeroSizeGraph", specs)
    else:
        try:
            native = native_compiler()
            if native is None:
                raise RuntimeError(f"the native compiler is not available ({_compiler_import_error})")
            disk = _configure_disk_cache(native)
            options = _options()
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
            if executable is not None:
                dynamic.note_static(graph)  # the next size generalizes from this one
            else:
                entry = _dynamic_entry(graph, native, name, options, disk, plain, t0)
                if entry is not None:
                    return entry
            if executable is None:
                t1 = time.perf_counter()
                lowered = lowering.lower(gm, graph.input_values(), origins=config.profile)
                metrics.timing("LoweringTime", time.perf_counter() - t1)
                t1 = time.perf_counter()
                if config.dump_dir:  # before compiling: what a compiler crash was given
                    debug.dump(name, "torch", lowered.torch_mlir)
                    debug.dump(name, "linalg", lowered.linalg)
                for listener in lowered_graph_listeners:
                    listener(name, graph, lowered.linalg)
                try:
                    executable = native.compile_linalg(
                        lowered.linalg, keep_llvm_dialect=bool(config.dump_dir), profile=config.profile, **options
                    )
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
            _note_compile(executable.compile_stats, disk)
            for message in native.take_disk_cache_warnings():
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            metrics.sample("KernelCount", executable.kernel_count)
            entry = _Compiled(name, executable, specs, gm)
            metrics.counter("UncachedCompile")
        except Exception as e:  # never fail the user: run it eagerly instead
            if isinstance(e, lowering.LoweringError):
                # Find the ops that cannot lower and run them eagerly from now
                # on, so that the rest of later traces compiles.
                culprits = lowering.find_unsupported(graph)
                for key in culprits:
                    for listener in unsupported_op_listeners:
                        listener(key)
                if culprits:
                    warnings.warn(
                        f"lazymlir: graph {name} ({len(graph.nodes)} ops) holds ops that do not compile; they run "
                        f"eagerly from now on, the rest compiles: "
                        f"{', '.join(sorted(f'{op} on {list(dtypes)}' for op, dtypes in culprits))}",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    return _Split(culprits)
            warnings.warn(
                f"lazymlir: graph {name} ({len(graph.nodes)} ops) failed to compile and runs eagerly: {str(e)[:2000]}",
                RuntimeWarning,
                stacklevel=3,
            )
            entry = _Eager(name, gm, "CompileFallback", specs)
    seconds = time.perf_counter() - t0
    if config.verbose:
        kernels = f", {entry.kernel_count} kernels" if entry.kernel_count is not None else ""
        detail = ""
        if type(entry) is _Compiled:
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
