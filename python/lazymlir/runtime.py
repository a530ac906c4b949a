"""Execute a traced graph: cache lookup, compile on a miss, run, return CPU tensors.

Compiled graphs use destination passing: outputs are allocated here with torch
and written in place by the executable.  A graph that cannot be compiled runs
eagerly, op by op, as an FX GraphModule on CPU tensors; the failure is cached so
it is not retried.  Graphs run on one worker thread, in submission order, while
the caller goes on tracing (``LAZYMLIR_ASYNC=0``: in the caller); barriers wait
for the job that writes what they read, ``wait_device_ops`` for all of them.
"""

import _thread
import atexit
import collections
import math
import operator
import threading
import time
import warnings
from typing import Callable, List, Sequence

import torch

from . import cache, config, debug, lowering, metrics, trace
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

        lowering._decomposition_table()
    except Exception:  # the first compile reports it
        pass


if not config.force_eager:
    threading.Thread(target=_prewarm, name="lazymlir-prewarm").start()


class _Compiled:
    __slots__ = ("executable", "out_specs", "output_map", "checked", "gm")

    def __init__(self, executable, out_specs, output_map, gm):
        self.executable = executable
        self.out_specs = out_specs  # one per result of the executable
        self.output_map = output_map  # graph output -> result (results are deduplicated)
        # The first run checks every buffer's dtype, shape and layout; the
        # cache key fixes them for the runs after it, which check sizes only.
        self.checked = False
        # The FX graph, run eagerly when a runtime check of the compiled code
        # fails (an index out of range, an integer division by zero).
        self.gm = gm

    @property
    def num_kernels(self) -> int:
        return self.executable.num_kernels

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        """The native run releases the GIL; ``background``: on the worker."""
        t0 = time.perf_counter()
        try:
            if self.checked:
                self.executable.run_allocated(inputs, outs, background=background)
            else:
                self.executable.run(inputs, outs, background=background)
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
            _run_fx(self.gm, inputs, [outs[i] for i in self.output_map])
        metrics.timing("ExecuteTime", time.perf_counter() - t0)


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

    __slots__ = ("gm", "counter", "out_specs", "output_map")
    num_kernels = None

    def __init__(self, gm, counter, out_specs):
        self.gm = gm
        self.counter = counter
        self.out_specs = out_specs
        self.output_map = tuple(range(len(out_specs)))

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        t0 = time.perf_counter()
        _run_fx(self.gm, inputs, outs)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)


# Called with the (op, input dtypes) of each op found not to lower alone
# (device.py makes it run eagerly for those dtypes).
unsupported_op_listeners: List[Callable] = []


# The kernel count of the last graph execute() ran (None: it ran eagerly).
last_kernels = None


def execute(outputs: Sequence[trace.Node]):
    """Start computing ``outputs`` (distinct nodes without data): returns their
    values as CPU tensors in the memory format of the nodes' metas (dense:
    contiguous buffers, permuted), in order, the job (runtime._Job) that fills
    them (None when nothing runs), and the kernel count of the graph that
    runs (None when it runs eagerly).  The tensors are allocated
    here (destination passing) and written by the worker: read them only after
    :func:`wait`."""
    global last_kernels
    t0 = time.perf_counter()
    graph = trace.collect(outputs, config.options_key())
    metrics.timing("CollectTime", time.perf_counter() - t0)
    entry = cache.lookup(graph.key)
    if entry is None:
        entry = _compile(graph)
        if type(entry) is _Split:
            # Ops that do not lower: computed eagerly in place, the rest of
            # the graph is traced again without them and compiled.
            _run_in_place(graph, entry.ops)
            return _execute_rest(outputs)
    elif type(entry) is _Compiled:
        metrics.counter("CachedCompile")
    if type(entry) is _Eager:
        metrics.counter(entry.counter)
    if _in_flight:
        _throttle()  # before this graph's outputs are allocated
    outs = [_empty(shape, dtype) for shape, dtype in entry.out_specs]
    inputs = graph.input_values()
    deps = []
    for n in graph.inputs:
        job = n.job
        if job is not None:
            if job.done() and job.exception() is None:
                n.job = None  # nothing left to wait for
            else:
                deps.append(job)
    job = _submit(entry, inputs, outs, deps)
    last_kernels = entry.num_kernels
    # Outputs that are one value share its tensor: device data is immutable.
    return graph.output_values([outs[i] for i in entry.output_map]), job, last_kernels


class _Split:
    """What _compile returns for a graph that holds ops that do not lower
    alone (found by lowering.find_unsupported); not cached."""

    __slots__ = ("ops",)

    def __init__(self, ops):
        self.ops = ops


def _run_in_place(graph: trace.Graph, ops) -> None:
    """Compute the nodes of ``graph`` whose op is in ``ops`` eagerly, in graph
    order: their pending inputs first (compiled graphs), then the op on CPU;
    each becomes device data (a multi-output op's getitem nodes do)."""
    users = {}
    for n in graph.nodes:
        if n.op is operator.getitem:
            users.setdefault(n.args[0], []).append(n)
    for n in graph.nodes:
        if n.data is not None or not isinstance(n.op, torch._ops.OpOverload) or \
                lowering.unsupported_key(n) not in ops:
            continue
        result = eager_value(n)
        if isinstance(n.meta, torch.Tensor):
            n.set_data(trace.device_data(result))
        else:
            for item in users.get(n, ()):
                item.set_data(trace.device_data(result[item.args[1]]))


def eager_value(n: trace.Node):
    """``n``'s op run on CPU (counted as ``aten::<op>``), its pending inputs
    computed first by compiled graphs."""
    pending = [i for i in dict.fromkeys(n.inputs) if i.data is None]
    if pending:
        values, job, kernels = execute(pending)
        for i, value in zip(pending, values):
            i.set_data(value, job, kernels)
    for i in n.inputs:
        wait(i)
    metrics.counter(n.op._schema.name)
    args = trace.map_nodes(n.args, _data)
    if n.op in trace.ADDRESSES_STORAGE:
        # Recorded on the value laid out contiguously (device._as_strided);
        # device data may be in another memory format.
        args = (args[0].contiguous(),) + tuple(args[1:])
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return n.op(*args, **{k: trace.map_nodes(v, _data) for k, v in n.kwargs.items()})


def _data(n: trace.Node) -> torch.Tensor:
    return n.data


def _execute_rest(outputs: Sequence[trace.Node]):
    """:func:`execute` for outputs some of which may have data already."""
    rest = [o for o in outputs if o.data is None]
    values, job, kernels = execute(rest) if rest else ([], None, None)
    computed = iter(values)
    return [o.data if o.data is not None else next(computed) for o in outputs], job, kernels


# Outputs at least this large come from the runtime's buffer pool.
_POOLED_BYTES = 128 * 1024


def _empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous output buffer.  Large ones come from the runtime's buffer
    pool (returned to it when the tensor dies): a training step's outputs are
    freed and allocated again with the same sizes every step, and a fresh
    large allocation is page-faulted in on its first write, which made a 4M
    element kernel 3x slower.  Small ones come from torch's allocator."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _POOLED_BYTES:
        return torch.empty(shape, dtype=dtype)
    if _compiler is None:  # nothing compiled yet: the pool is the native module's
        return torch.empty(shape, dtype=dtype)
    code = dtype_table.dlpack_code(dtype)
    if code is None:  # a dtype only eager graphs have: bytes, viewed
        return _compiler.pooled_tensor((nbytes,), 1, 8).view(dtype).view(shape)
    return _compiler.pooled_tensor(shape, *code)




def empty_cache() -> int:
    """Return the memory the runtime's buffer pool holds idle (outputs and
    temporaries freed by earlier steps, kept for reuse) to the system, after
    the graphs already submitted finish; returns how many bytes.  Like
    ``torch.cuda.empty_cache()``: memory in use is not affected, and the
    next steps page fresh blocks in again."""
    wait_device_ops()
    return 0 if _compiler is None else _compiler.trim_buffer_pool()


# ----------------------------------------------------------------------------
# Asynchronous execution: one worker thread runs graphs in the order they were
# submitted, so a graph's inputs made by an earlier graph are ready when it
# starts.  A thread that waits for a job the worker has not started runs the
# queued jobs up to it itself (in order, on every core): a step that is waited
# for at once then costs no thread hand-offs.  A failed job poisons the jobs
# that read its outputs (they would read garbage); its error is raised by the
# next wait, and by every read of a tensor it (or a job depending on it)
# should have computed.

_worker = None
_last_job = None
_unreported: List[BaseException] = []  # errors of failed jobs, oldest first


class DependencyError(RuntimeError):
    """A graph did not run because a graph it reads from failed."""


def _run_job(entry, inputs, outs, deps, background=True):
    for d in deps:
        e = d.exception()  # done: submitted earlier to the same worker
        if e is not None:
            raise DependencyError(f"lazymlir: not run, an earlier step it reads from failed: {e!r}") from e
    try:
        entry.run_into(inputs, outs, background)
    except BaseException as e:
        _unreported.append(e)
        raise


class _Job:
    """One submitted graph run: done once it finished, with its error (or
    None). Lighter than concurrent.futures.Future (a lock held until the run
    ends, no Condition): a step creates one."""

    __slots__ = ("_running", "_finished", "_error")

    def __init__(self):
        self._running = _thread.allocate_lock()
        self._running.acquire()
        self._finished = False
        self._error = None

    def done(self) -> bool:
        return self._finished

    def exception(self):
        """Wait until the run finished; its error, or None."""
        if not self._finished:
            self._running.acquire()
            self._running.release()
        return self._error

    def run(self, box: list, background: bool) -> None:
        """Run the job whose arguments are the one item of ``box``.  The
        arguments (the step's buffers) are freed before the job counts as
        done: a thread freeing tensors after that could still be doing so
        while the interpreter exits (atexit waits for the last job), and a
        daemon thread that wants the GIL back during finalization is ended
        by pthread_exit inside torch's tensor deallocator: std::terminate."""
        args = box.pop()
        try:
            _run_job(*args, background=background)
        except BaseException as e:
            self._error = e
        del args
        self._finished = True
        self._running.release()


class _Worker:
    """Runs submitted jobs one at a time, in order: on its own thread, or on
    a thread that waits for one of them (:meth:`run_until`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue = collections.deque()  # (_Job, [arguments of _run_job])
        self._busy = False  # a job is running (on the worker or a waiter)
        self._thread = threading.Thread(target=self._loop, name="lazymlir-worker", daemon=True)
        self._thread.start()

    def submit(self, *args) -> _Job:
        job = _Job()
        with self._lock:
            self._queue.append((job, [args]))
            if not self._busy:
                self._wake.notify()
        return job

    def _take(self):
        """The next job and the box of its arguments, marked running (the lock
        is held)."""
        job, box = self._queue.popleft()
        self._busy = True
        return job, box

    def _finish(self, job, box, background):
        try:
            job.run(box, background)
        finally:
            with self._lock:
                self._busy = False
                if self._queue:
                    self._wake.notify()

    def _loop(self):
        while True:
            with self._lock:
                while self._busy or not self._queue:
                    self._wake.wait()
                job, box = self._take()
            self._finish(job, box, True)
            del job, box

    def run_until(self, target: _Job) -> None:
        """Run queued jobs on this thread, up to ``target``, while the worker
        is idle; returns when ``target`` is done or the worker is busy."""
        while not target.done():
            with self._lock:
                if self._busy or not self._queue:
                    return
                job, box = self._take()
            self._finish(job, box, False)
            del job, box


def _submit(entry, inputs, outs, deps):
    global _worker, _last_job
    if not config.async_execution:
        job = _Job()
        job.run([(entry, inputs, outs, deps)], background=False)
        _last_job = job
        return job
    if _worker is None:
        _worker = _Worker()
        atexit.register(_drain)
    _last_job = _worker.submit(entry, inputs, outs, deps)
    _in_flight.append(_last_job)
    return _last_job


# Jobs submitted to the worker and not seen finished, oldest first.
_in_flight = collections.deque()


def _throttle() -> None:
    """Wait until fewer than ``config.max_in_flight`` submitted jobs are
    unfinished (their errors are raised later, by the barriers that read
    their results or by wait_device_ops)."""
    q = _in_flight
    while q and q[0].done():
        q.popleft()
    while len(q) >= config.max_in_flight:
        metrics.counter("InFlightWait")
        _wait_for(q.popleft())


def _drain() -> None:
    """At interpreter exit: let the last job submitted (hence every job)
    finish before the worker's daemon thread is stopped."""
    if _last_job is not None:
        _last_job.exception()


def _wait_for(job: _Job):
    """Block until ``job`` is done; returns its exception (or None). A job
    not started yet is run here (with the ones queued before it) when the
    worker is idle. While this thread waits, the worker's parallel loops may
    use every core; while it runs Python (tracing), they leave it one."""
    if not job.done() and _worker is not None:
        _worker.run_until(job)
    if job.done():
        return job.exception()
    if _compiler is None:  # no compiled graph runs
        return job.exception()
    with _compiler.host_wait():
        return job.exception()


def wait(node: trace.Node) -> None:
    """Block until ``node``'s device data is written; raise the error of the job
    that should have written it."""
    job = node.job
    if job is None:
        return
    e = _wait_for(job)
    if e is None:
        node.job = None
        return
    root = e.__cause__ if isinstance(e, DependencyError) else e
    if root in _unreported:
        _unreported.remove(root)
    raise e


def wait_device_ops() -> None:
    """Block until every graph started so far (by mark_step() or a barrier) has
    finished, like torch._lazy.wait_device_ops(); raise the first error of a
    graph that failed and was not reported yet."""
    if _last_job is not None:
        _wait_for(_last_job)
    if _unreported:
        first = _unreported[0]
        _unreported.clear()
        raise first


# Recompiling one graph structure for new input shapes is the recompilation storm
# users of lazy systems dread: it is counted, and reported when it repeats.
STORM_WARNING_AT = 8


def _note_shapes(graph: trace.Graph, name: str) -> None:
    """Best effort: a graph whose ops carry sizes (view, zeros) looks new, not
    recompiled, when those sizes change."""
    n_inputs = len(graph.inputs)
    entries = graph.key[0]
    shapes = tuple(tuple(n.data.shape) for n in graph.inputs)
    structure = (tuple(e if type(e[0]) is not torch.Size else (len(e[0]),) + e[1:] for e in entries),) + graph.key[1:]
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


def _zero_size(graph: trace.Graph) -> bool:
    metas = [n.data for n in graph.inputs]
    for n in graph.nodes:
        metas.extend(n.meta if isinstance(n.meta, (list, tuple)) else (n.meta,))
    return any(isinstance(m, torch.Tensor) and m.numel() == 0 for m in metas)


# The native compile's phases: (compile_stats key, label); each is recorded as
# the timing Compile<Label>Time.
_PHASES = (("parse", "Parse"), ("tensor_stage", "TensorStage"), ("bufferize_stage", "BufferizeStage"),
           ("llvm_stage", "LLVMStage"), ("translate", "Translate"), ("optimize", "Optimize"),
           ("codegen", "Codegen"), ("link", "Link"))

# Sizes of each native compile, recorded as samples.
_SIZES = (("input_ops", "LinalgOpsPerGraph"), ("loop_nests", "LoopNestsPerGraph"),
          ("distinct_kernels", "DistinctKernelsPerGraph"), ("kernels_compiled", "KernelsCompiled"),
          ("kernels_reused", "KernelsReused"), ("kernels_from_disk", "KernelsFromDisk"),
          ("llvm_instructions", "LLVMInstructionsPerGraph"), ("object_bytes", "ObjectBytesPerGraph"))


def _note_compile(stats: dict, disk: bool) -> None:
    """Metrics of one native compile (or disk cache load)."""
    if stats["from_disk"]:
        metrics.counter("DiskCacheHit")
        metrics.timing("DiskCacheLoadTime", stats["total"])
        for key in ("distinct_kernels", "kernels_reused", "kernels_from_disk"):
            metrics.sample(dict(_SIZES)[key], stats[key])
    else:
        if disk:
            metrics.counter("DiskCacheMiss")
        for key, label in _PHASES:
            metrics.timing(f"Compile{label}Time", stats[key])
        for key, name in _SIZES:
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


def _compile(graph: trace.Graph):
    t0 = time.perf_counter()
    gm = trace.to_fx(graph)
    name = trace.graph_hash(graph.key)
    _note_shapes(graph, name)
    entry = None
    specs = graph.output_specs()  # the buffers the outputs are written into
    dtypes = {n.data.dtype for n in graph.inputs} | {dt for _, dt in specs} | {dt for _, dt in graph.scalars}
    if config.force_eager:
        entry = _Eager(gm, "EagerGraph", specs)
    elif not dtypes <= dtype_table.SUPPORTED:
        entry = _Eager(gm, "EagerGraph", specs)
    elif _zero_size(graph):
        # The tracer keeps zero-size tensors out of graphs (device._zero_size);
        # compiled loops over an empty dimension divide by it or read past
        # nothing, so one that gets through runs eagerly.
        entry = _Eager(gm, "ZeroSizeGraph", specs)
    else:
        try:
            native = native_compiler()
            if native is None:
                raise RuntimeError(f"the native compiler is not available ({_compiler_import_error})")
            disk = _configure_disk_cache(native)
            options = dict(fusion=config.fusion, channels_last=config.channels_last, threads=config.threads,
                           tiered=config.tiered)
            executable = None
            # A trace compiled by an earlier process: its record names the
            # compiled graph on disk (no torch-mlir, no MLIR work). Dumps
            # want the IR, so they always lower.
            record = cache.record_key(native, graph.key) if disk and not config.dump_dir else None
            if record is not None:
                found = cache.read_record(native, record)
                if found is not None:
                    executable = native.load_cached(found[0], **options)
                    output_map = found[1]
            if executable is None:
                t1 = time.perf_counter()
                lowered = lowering.lower(gm, graph.input_values())
                metrics.timing("LoweringTime", time.perf_counter() - t1)
                t1 = time.perf_counter()
                try:
                    executable = native.compile_linalg(lowered.linalg, keep_llvm_ir=bool(config.dump_dir), **options)
                except Exception:
                    # The IR that failed, for the bug report.
                    debug.dump(name, "torch", lowered.torch_mlir)
                    debug.dump(name, "linalg", lowered.linalg)
                    raise
                metrics.timing("CompileTime", time.perf_counter() - t1)
                output_map = lowered.output_map
                if record is not None:
                    cache.write_record(native, record, executable.cache_key, output_map)
                if config.dump_dir:
                    kernels = executable.num_kernels
                    debug.dump(name, "torch", lowered.torch_mlir, kernels)
                    debug.dump(name, "linalg", lowered.linalg, kernels)
                    debug.dump(name, "llvm", executable.llvm_ir, kernels)
            _note_compile(executable.compile_stats, disk)
            for message in native.take_disk_cache_warnings():
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            metrics.sample("KernelsPerGraph", executable.num_kernels)
            results = {}
            for spec, i in zip(specs, output_map):
                results.setdefault(i, spec)
            entry = _Compiled(executable, [results[i] for i in range(len(results))], output_map, gm)
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
                f"lazymlir: graph {name} ({len(graph.nodes)} ops) failed to compile and runs eagerly: "
                f"{str(e)[:2000]}",
                RuntimeWarning,
                stacklevel=3,
            )
            entry = _Eager(gm, "CompileFallback", specs)
    seconds = time.perf_counter() - t0
    if config.verbose:
        kernels = f", {entry.num_kernels} kernels" if entry.num_kernels is not None else ""
        detail = ""
        if type(entry) is _Compiled:
            st = entry.executable.compile_stats
            if st["from_disk"]:
                detail = f" [from the disk cache: {st['distinct_kernels']} kernels, link {st['link'] * 1e3:.0f} ms]"
            else:
                phases = ", ".join(f"{label} {st[k] * 1e3:.0f}" for k, label in _PHASES)
                detail = (f" [{st['input_ops']} linalg ops, {st['loop_nests']} loop nests, {st['distinct_kernels']} "
                          f"distinct kernels: {st['kernels_compiled']} compiled, {st['kernels_reused']} reused, "
                          f"{st['kernels_from_disk']} from disk; {st['llvm_instructions']} LLVM instructions, "
                          f"{st['object_bytes']} object bytes; ms: {phases}]")
        print(f"lazymlir: compiled graph {name}: {len(graph.nodes)} ops, {len(graph.inputs)} inputs, "
              f"{type(entry).__name__}{kernels}, {seconds * 1e3:.1f} ms{detail}")
    cache.insert(graph.key, entry, seconds)
    return entry
