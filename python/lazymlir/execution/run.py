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
import operator
import threading
import time
from typing import List, Sequence

import torch
import torch.autograd.profiler as _autograd_profiler

from .. import _device, config, metrics
from ..lowering import linalg
from ..trace import dynamic, ir
from . import aside, cache, donation, entries, profiler, tierup

from .compilation import compile_graph, finish_aside
from .entries import Compiled, Donating, Eager, Split
from . import errors
from .errors import DependencyError, drop_frames, report, unreported as _unreported


# The kernel count of the last graph execute() ran (None: it ran eagerly).
last_kernels = None


def execute(outputs: Sequence[ir.Node], now: bool = False, condition: bool = False, donate=()):
    """Start computing ``outputs`` (distinct nodes without data): returns their
    values as CPU tensors in the memory format of the nodes' metas (dense:
    contiguous buffers, permuted), in order, the job (run._Job) that fills
    them (None when nothing runs), and the kernel count of the graph that
    runs (None when it runs eagerly).  The tensors are allocated
    here (destination passing) and written by the worker: read them only after
    :func:`wait`.

    ``now``: the caller waits for the result at once (a barrier).  A graph
    whose inputs are all computed then runs on the calling thread before the
    jobs queued ahead of it (graphs do not write their inputs then, so the
    order does not matter to it): a data-dependent branch in the middle of a step
    (Hugging Face's attention-mask checks) does not wait for the previous
    step's graph to finish.

    ``condition``: the read is a Python branch on one bool (``if
    (ids == pad).any():``, Hugging Face's cache-position and padding checks
    before each generated token). A graph not compiled before that is only a
    few small ops on finished values (config.eager_read_ops) then runs
    eagerly: compiling it would cost far more than it ever saves, and one
    per size would be compiled (``EagerReadGraph`` counts them).

    ``donate``: (old value, new value) node pairs whose old buffer the new
    value may be written into (lazymlir.execution.donation)."""
    global last_kernels, _waited_at_once, _last_job
    t0 = time.perf_counter()
    graph = ir.collect(outputs, config.options_key())
    if donate:
        graph = donation.offer(graph, donate)
    metrics.timing("CollectTime", time.perf_counter() - t0)
    entry = cache.lookup(graph.key)
    if entry is None and dynamic.has_templates() and not ir.donated(graph.key):
        entry = dynamic.lookup(graph)  # a dynamic graph this trace is an instance of
        if entry is not None:
            cache.insert(graph.key, entry, 0.0)
            metrics.counter("CachedCompile")
    elif type(entry) is Compiled:
        metrics.counter("CachedCompile")
        if entry.checked and entry.out_specs is not None and not (entry.wrong or entry.donated):  # static: replayable
            exe = entry.executable
            _device.arm_replay(graph.key, exe, exe.address, entry.out_specs, exe.kernel_count)
    if type(entry) is Compiled and entry.dynamic:
        tierup.note_dynamic_run(graph, entry)  # a size that keeps coming back gets its static graph
    elif type(entry) is aside.Pending and aside.note_run(entry):  # its child finished
        entry = finish_aside(entry, graph)
    if entry is None and condition and _small_read(graph):
        return _run_read_eagerly(graph), None, None
    if entry is None:
        entry = compile_graph(graph)
    if type(entry) is Split:  # ops that do not lower run eagerly in place; the rest is traced again
        _run_in_place(graph, entry.ops)
        return _execute_rest(outputs, now)
    if type(entry) in (Eager, aside.Pending):
        metrics.counter(entry.counter)
    deps = _unfinished_inputs(graph)
    ahead = now and not deps and _in_flight and not _running(entry)
    if _in_flight and not ahead:
        _throttle()  # before this graph's outputs are allocated
    skip = entry.donated_outputs if isinstance(entry, Donating) else ()
    specs = entry.out_specs or graph.output_specs()
    outs = [None if j in skip else output_buffer(shape, dtype) for j, (shape, dtype) in enumerate(specs)]
    inputs = graph.input_values()
    if skip:
        donation.assign(entry, graph, inputs, outs, not ahead, output_buffer)
    if type(entry) is Compiled and entry.template is not None and entry.template.free:
        inputs += dynamic.phantom_inputs(entry, graph)
    if not now and _handed is not None:
        _waited_at_once = 0  # the last step handed back was not waited for
    waited = not now and not deps and _waited_at_once >= 2 and config.async_execution and idle()
    if ahead or (now and not deps and idle()) or waited:
        # Waited for at once: run here rather than hand it to the worker and
        # sleep until it is done (a decode loop's step, read by its stopping
        # check, saves the two thread switches). Ahead of queued jobs, or
        # with none unfinished. A mark_step() whose last two steps were
        # waited for at once (the next wait came within _AT_ONCE_S) runs
        # its step here too.
        if ahead:
            metrics.counter("RunAhead")
        if waited:
            metrics.counter("RunAtMarkStep")
        job = _Job(entry)
        job.run([(entry, inputs, outs, deps)], background=False)
        if waited:
            _last_job = job  # done: wait_device_ops() has nothing to wait for
    else:
        job = _submit(entry, inputs, outs, deps)
    last_kernels = entry.kernel_count
    return graph.output_values(outs), job, last_kernels


def replay(storages, now: bool = False) -> bool:
    """Compute the pending values of ``storages`` (a mark_step's, or with
    ``now`` a barrier's) by the device's replay (csrc/Replay.cpp) where
    :func:`execute` would run their graph, compiled and run before, on this
    thread: a barrier with nothing unfinished, or a mark_step whose last two
    steps were waited for at once. Whether it did (if not, nothing
    happened). No ``CollectTime``/``ExecuteTime`` timings: each line here
    costs, with the caches cold."""
    global last_kernels, _last_job
    if not now and (_handed is not None or _waited_at_once < 2 or not config.async_execution):
        return False
    if not config.replay or (_in_flight and not idle()) or profiler.active or _autograd_profiler._is_profiler_enabled:
        return False
    # A mark_step's outputs get the finished _DONE, as the Python path's get its job.
    kernels = _device.replay(storages, config.options_key(), None if now else _DONE)
    if kernels is None:
        return False
    last_kernels = kernels
    cache.count_hit()
    metrics.counter("Sync")
    metrics.counter("CachedCompile")
    metrics.counter("Replay")
    if not now:
        metrics.counter("RunAtMarkStep")
        _last_job = _DONE
        hand_back(_DONE)
    return True


# A step handed back by mark_step() (its job, when) and not waited for yet,
# and how many steps in a row were waited for at once: after less than
# _AT_ONCE_S of the caller's own CPU time, as `mark_step(); loss.item()` or
# a benchmark's mark and wait do. Such a caller gains nothing from the
# worker, whose hand-offs (waking it, the waiter running the step itself)
# cost 5-40 us a step, and loses the replay (C++ instead of the Python
# path); one that works for less than _AT_ONCE_S before waiting loses at
# most that much overlap. The caller's thread time, not the wall clock:
# the worker taking the GIL as the step starts (up to Python's 5 ms switch
# interval) or a loaded host delays the wait without the caller doing
# anything. Measured on a loaded 2-core host: a read right after
# mark_step() came 0.1-9 ms later by the wall clock, 50-280 us of the
# caller's time (the rest of mark_step and the read's own path up to its
# wait). A caller blocked longer than _AT_ONCE_WALL_S (waiting for its data
# loader, sleeping) used the overlap: not at once.
_AT_ONCE_S = 1e-3
_AT_ONCE_WALL_S = 10e-3
_handed = None
_waited_at_once = 0


def hand_back(job) -> None:
    """mark_step() returns ``job``'s step to its caller, unfinished or not."""
    global _handed
    _handed = (job, time.thread_time(), time.perf_counter())


def _note_wait(job) -> None:
    global _handed, _waited_at_once
    handed = _handed
    if handed is not None and handed[0] is job:
        _handed = None
        at_once = time.thread_time() - handed[1] < _AT_ONCE_S and time.perf_counter() - handed[2] < max(
            _AT_ONCE_WALL_S, _AT_ONCE_S
        )
        _waited_at_once = _waited_at_once + 1 if at_once else 0


def _unfinished_inputs(graph: ir.Graph) -> list:
    """The jobs computing ``graph``'s inputs that have not finished (or
    failed); the inputs of finished ones forget them."""
    deps = []
    for n in graph.inputs:
        job = n.job
        if job is not None:
            if job.done() and job.exception() is None:
                n.job = None  # nothing left to wait for
            else:
                deps.append(job)
    return deps


def _small_read(graph: ir.Graph) -> bool:
    """Whether a barrier's graph is a few small ops on values already
    computed and finished (config.eager_read_ops): eager runs it sooner than
    a compile, or even a cached graph's run, would."""
    if len(graph.nodes) > config.eager_read_ops:
        return False
    limit = config.eager_read_elements
    for n in graph.nodes:
        if not (isinstance(n.op, torch._ops.OpOverload) or n.op is operator.getitem):
            return False
        metas = n.meta if isinstance(n.meta, (tuple, list)) else (n.meta,)
        if any(isinstance(m, torch.Tensor) and m.numel() > limit for m in metas):
            return False
    return not _unfinished_inputs(graph)


def read_eagerly(nodes: List[ir.Node]) -> bool:
    """For a Python branch on one bool, the first of ``nodes`` (pending, as
    the others): compute it eagerly when the graph that does was not
    compiled before and is a small read (config.eager_read_ops); whether it
    did.  The
    others it computes on the way get their values too (a decode loop's
    stopping check reads the tokens just appended: nothing is left pending
    after the last one); the rest stay in the trace for the next barrier's
    graph (Hugging Face's padding check in the middle of a forward pass
    would otherwise compute the embeddings eagerly every token)."""
    pending = _pending_ops(nodes[0], config.eager_read_ops)
    if pending is None:
        return False  # not collected: a decode step's stopping check reads the whole step
    outputs = nodes[:1] + [n for n in nodes[1:] if id(n) in pending]
    graph = ir.collect(outputs, config.options_key())
    if cache.lookup(graph.key) is not None or not _small_read(graph):
        return False
    for n, value in zip(outputs, _run_read_eagerly(graph)):
        n.set_data(value)
    return True


def _pending_ops(node: ir.Node, limit: int):
    """The ids of the pending nodes computing ``node`` needs, or None when
    there are more than ``limit`` (a walk that stops there, cheaper than
    collecting a whole step)."""
    seen = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n.data is None and id(n) not in seen:
            if len(seen) == limit:
                return None
            seen.add(id(n))
            todo.extend(n.inputs)
    return seen


def _run_read_eagerly(graph: ir.Graph) -> List[torch.Tensor]:
    """The outputs of a small read's graph computed op by op on CPU, as
    :func:`execute` returns them (in buffers of the outputs' memory formats)."""
    metrics.counter("EagerReadGraph")
    values = {n: n.data for n in graph.inputs}
    get = values.__getitem__
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for n in graph.nodes:
            if n.op is operator.getitem:
                values[n] = values[n.args[0]][n.args[1]]
            else:  # views as reshapes (as in ir.to_fx): the values here are fresh, not the user's strides
                values[n] = _call(n, get, torch.ops.aten.reshape.default if n.op in ir.AS_RESHAPE else n.op)
    outs = [output_buffer(shape, dtype) for shape, dtype in graph.output_specs()]
    for out, o, perm in zip(outs, graph.outputs, graph.output_perms or [None] * len(graph.outputs)):
        out.copy_(values[o] if perm is None else values[o].permute(perm))
    return graph.output_values(outs)


def _run_in_place(graph: ir.Graph, ops) -> None:
    """Compute the nodes of ``graph`` whose op is in ``ops`` eagerly, in graph
    order: their pending inputs first (compiled graphs), then the op on CPU;
    each becomes device data (a multi-output op's getitem nodes do)."""
    users = {}
    for n in graph.nodes:
        if n.op is operator.getitem:
            users.setdefault(n.args[0], []).append(n)
    for n in graph.nodes:
        if n.data is not None or not isinstance(n.op, torch._ops.OpOverload) or linalg.unsupported_key(n) not in ops:
            continue
        result = eager_value(n)
        if isinstance(n.meta, torch.Tensor):
            n.set_data(ir.device_data(result))
        else:
            for item in users.get(n, ()):
                item.set_data(ir.device_data(result[item.args[1]]))


def eager_value(n: ir.Node):
    """``n``'s op run on CPU (counted as ``aten::<op>``), its pending inputs
    computed first by compiled graphs."""
    pending = [i for i in dict.fromkeys(n.inputs) if i.data is None]
    if pending:
        values, job, kernels = execute(pending, now=True)
        for i, value in zip(pending, values):
            i.set_data(value, job, kernels)
    for i in n.inputs:
        wait(i)
    metrics.counter(n.op._schema.name)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return _call(n, _data)


def _call(n: ir.Node, value_of, op=None):
    """``op`` (default ``n``'s) on ``n``'s arguments, each node replaced by
    ``value_of(node)``; the caller holds no_grad and autocast off."""
    args = ir.map_nodes(n.args, value_of)
    if n.op in ir.ADDRESSES_STORAGE:
        # Recorded on the value laid out contiguously (ops._as_strided);
        # device data may be in another memory format.
        args = (args[0].contiguous(),) + tuple(args[1:])
    return (op or n.op)(*args, **{k: ir.map_nodes(v, value_of) for k, v in n.kwargs.items()})


def _data(n: ir.Node) -> torch.Tensor:
    return n.data


def _execute_rest(outputs: Sequence[ir.Node], now: bool = False):
    """:func:`execute` for outputs some of which may have data already."""
    rest = [o for o in outputs if o.data is None]
    values, job, kernels = execute(rest, now) if rest else ([], None, None)
    computed = iter(values)
    return [o.data if o.data is not None else next(computed) for o in outputs], job, kernels


# output_buffer(shape, dtype): a contiguous output buffer; from the runtime's
# buffer pool when it is at least 128 KiB (csrc/PooledBuffers.cpp says why).
output_buffer = _device.output_buffer


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


def _run_job(entry, inputs, outs, deps, background=True):
    for d in deps:
        e = d.exception()  # done: submitted earlier to the same worker
        if e is not None:
            raise DependencyError(f"lazymlir: not run, an earlier step it reads from failed: {e!r}") from e
    try:
        if not profiler.active and not torch.autograd.profiler._is_profiler_enabled:
            entry.run_into(inputs, outs, background)
        else:
            profiler.run(entry, inputs, outs, background)
    except BaseException as e:
        _unreported.append(e)
        raise


class _Job:
    """One submitted graph run: done once it finished, with its error (or
    None). Lighter than concurrent.futures.Future (a lock held until the run
    ends, no Condition): a step creates one."""

    __slots__ = ("_running", "_finished", "_error", "entry")

    def __init__(self, entry=None):
        self.entry = entry  # the compiled graph it runs, until it finished
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
            drop_frames(e)
            self._error = e
        del args
        self.entry = None  # only unfinished jobs need it (_running)
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
        job = _Job(args[0])
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
                self._wake.notify_all()  # the worker (a job queued) or wait_idle

    def wait_idle(self) -> None:
        """Until nothing is queued or running (at exit: the worker thread then
        waits on its condition, holding no GIL and freeing nothing)."""
        with self._lock:
            while self._busy or self._queue:
                self._wake.wait()

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
        job = _Job(entry)
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

# The job of every step the replay ran (done). The replay holds executables
# while they are cached, and not past the interpreter's exit.
_DONE = _Job()
_DONE._finished = True
_DONE._running.release()
_device.install_replay(_Job)
cache.on_forget(_device.forget_replays)
atexit.register(_device.forget_replays)


def _running(entry) -> bool:
    """Whether a submitted job of ``entry`` may still be queued or running
    (one executable is never run by two threads at once: its runtime-check
    flag is per graph)."""
    return any(j.entry is entry and not j.done() for j in _in_flight)


def _unfinished() -> collections.deque:
    """_in_flight without the jobs seen finished at its front."""
    q = _in_flight
    while q and q[0].done():
        q.popleft()
    return q


def idle() -> bool:
    """No submitted job is unfinished."""
    return not _unfinished()


def _throttle() -> None:
    """Wait until fewer than ``config.max_in_flight`` submitted jobs are
    unfinished (their errors are raised later, by the barriers that read
    their results or by wait_device_ops)."""
    q = _unfinished()
    while len(q) >= config.max_in_flight:
        metrics.counter("InFlightWait")
        _wait_for(q.popleft())


throttle = _throttle


def wait_all() -> None:
    """Block until every submitted job has finished; raises nothing."""
    if _last_job is not None and _last_job is not _DONE:
        _wait_for(_last_job)


def _drain() -> None:
    """At interpreter exit: let the last job submitted (hence every job)
    finish before the worker's daemon thread is stopped."""
    if _last_job is not None:
        _last_job.exception()
    if _worker is not None:
        _worker.wait_idle()


def _wait_for(job: _Job):
    """Block until ``job`` is done; returns its exception (or None). A job
    not started yet is run here (with the ones queued before it) when the
    worker is idle. While this thread waits, the worker's parallel loops may
    use every core; while it runs Python (tracing), they leave it one."""
    _note_wait(job)
    if not job.done() and _worker is not None:
        _worker.run_until(job)
    if job.done():
        return job.exception()
    if entries._compiler is None:  # no compiled graph runs
        return job.exception()
    with entries._compiler.host_wait():
        return job.exception()


def wait(node: ir.Node) -> None:
    """Block until ``node``'s device data is written; raise the error of the job
    that should have written it."""
    job = node.job
    if job is None:
        return
    e = _wait_for(job)
    if e is None:
        node.job = None
        return
    report(e)


def wait_device_ops() -> None:
    """Block until every graph started so far (by mark_step() or a barrier) has
    finished, like torch._lazy.wait_device_ops(); raise the first error of a
    graph that failed and was not reported yet."""
    job = _last_job
    if job is _DONE:
        _note_wait(job)  # a step the replay ran: done
    elif job is not None:
        _wait_for(job)
    if _unreported:
        first = _unreported[0]
        _unreported.clear()
        report(first)
    if errors.on_settled is not None:
        errors.on_settled()


profiler.wait_for_runs = wait_device_ops
