"""Barriers: what makes the lazy device compute. ``.item()``, ``.cpu()``,
``print`` and ``bool()`` read a tensor (:func:`_cpu_alias`), ``mark_step()``
computes everything pending; each executes, in one graph, the pending values
of the storages it needs (``run.execute``), or reads a few small ops eagerly
(``run.read_eagerly``). Computed nodes become device data (plain CPU
tensors), so nothing is computed twice."""

import collections
from typing import List

import torch

from .. import _device, metrics
from ..execution import entries, run
from ..execution import errors as run_errors
from ..trace.ir import ADDRESSES_STORAGE
from .tensor import _register, state

aten = torch.ops.aten


def _sync(storages, now: bool = False, condition: bool = False, complete: bool = False) -> None:
    """Compute the pending base values of ``storages`` in one graph (``now``:
    the caller waits for them at once; ``condition``: for a Python branch on
    one bool; see run.execute): replayed by the device's C++ when their graph
    was compiled and run before (run.replay), else through run.execute.
    First, an earlier step found failed is given back and its error raised
    (:func:`_settle`). ``complete``: ``storages`` are every pending one, so
    no value outside the graph reads what they held before: the graph may
    write their new values into those buffers (lazymlir.execution.donation)."""
    _settle(storages, now)
    if run.replay(storages, now):
        return
    todo = _pending_bases(storages)
    if not todo:
        return
    metrics.counter("Sync")
    donate = [(s.prior, s.base) for s in storages if s.prior is not None and s.base.data is None] if complete else ()
    results, job, kernels = run.execute(todo, now, condition, donate)
    del donate
    for node, value in zip(todo, results):
        node.set_data(value, job, kernels)
    _record(storages, job)
    if not now and job is not None:
        run.hand_back(job)


# ----------------------------------------------------------------------------
# A step that fails changes nothing.  A write keeps the value its storage had
# before its first pending write (Storage.prior); the barrier that computes
# the storage moves it into the step's record here, with the node the step
# computes, until the step is known to have finished well.  When a step
# fails (an index out of range, a failed runtime check, a kernel error),
# every storage it wrote gets that value back, and so does every pending
# storage whose new value reads what a failed step computed: the step
# traced on top of it (mark_step() only: the failure surfaces at the next
# mark_step, which waits for the step before it: config.max_in_flight).
# Tensors the failed step made have no earlier value: reading them raises
# its error.

# (job, [(storage, value before, value the job computes)]), oldest first.
_steps = collections.deque()


def _record(storages, job) -> None:
    """After ``storages`` were computed by ``job`` (None: eagerly, done)."""
    undo = []
    for s in storages:
        prior = s.prior
        if prior is not None and s.base.data is not None:
            s.prior = None
            if job is not None and not (job.done() and job.exception() is None):
                undo.append((s, prior, s.base))
    if undo:
        _steps.append((job, undo))


def _prune() -> None:
    """Forget the records of steps that finished well (their values before
    are not kept alive past them)."""
    _keep(lambda job: not (job.done() and job.exception() is None))


def _keep(wanted) -> None:
    """Keep the records of the steps whose job is ``wanted``."""
    kept = [step for step in _steps if wanted(step[0])]
    if len(kept) != len(_steps):
        _steps.clear()
        _steps.extend(kept)


def _settle(storages, now: bool) -> None:
    """Before a barrier computes anything: a mark_step first waits until
    fewer than config.max_in_flight steps are unfinished (the one before it,
    by default); then a step found failed is given back (:func:`_give_back`)
    and its error raised here."""
    if not now:
        run.throttle()
    if not _steps:
        return
    _prune()
    if any(job.done() and job.exception() is not None for job, _ in _steps):
        error = _give_back(storages)
        if error is not None:
            run_errors.reraise(error)


def _give_back(storages=()):
    """Every step that failed gives back what it wrote (after the steps
    still running finished); pending writes (``storages``, a barrier's,
    and those registered) that read a failed value are dropped. The error of the oldest failed step (its cause, for a step
    that failed because an earlier one did), or None."""
    run.wait_all()
    failed = [(job, undo) for job, undo in _steps if job.exception() is not None]
    if not failed:
        _prune()
        return None
    tainted = {}  # id(node) -> whether its value reads what a failed step computed

    def reads_failed(root) -> bool:
        todo = [root]
        while todo:  # iterative: a step's trace is a long chain of nodes
            node = todo[-1]
            if id(node) in tainted:
                todo.pop()
            elif node.data is not None:
                job = node.job
                tainted[id(node)] = job is not None and job.done() and job.exception() is not None
                todo.pop()
            else:
                missing = [i for i in node.inputs if id(i) not in tainted]
                if missing:
                    todo.extend(missing)
                else:
                    tainted[id(node)] = any(tainted[id(i)] for i in node.inputs)
                    todo.pop()
        return tainted[id(root)]

    for s in list(storages) + _device.take_pending():
        if s.base.data is None:
            if not reads_failed(s.base):
                _register(s)  # independent of the failure: stays pending
            elif s.prior is not None:
                _restore(s, s.prior)
            # else made on a failed value, with none before: no longer pending
            # (a read computes it, and raises the failed step's error)
    for job, undo in reversed(failed):
        for s, before, after in undo:
            if s.base is after:
                _restore(s, before)
    errors = [job.exception() for job, _ in failed]
    run_errors.forget(errors)
    _keep(lambda job: job.exception() is None)
    metrics.counter("FailedStepGivenBack", len(failed))
    return run_errors.root(errors[0])


def _restore(s, value) -> None:
    s.base = value
    s.prior = None
    s.version += 1  # its views recompute their values from it


def _on_failure() -> None:
    """A barrier is about to raise a step's error (run.wait, wait_device_ops)."""
    if _steps:
        _give_back()


run_errors.on_failure = _on_failure
run_errors.on_settled = _prune


def _pending_bases(storages) -> list:
    """The distinct base values of ``storages`` not computed yet, in order."""
    return list({id(s.base): s.base for s in storages if s.base.data is None}.values())


def _read_eagerly(storages) -> bool:
    """A Python branch on one bool, the first of ``storages``, computed
    eagerly when it is a few small ops (run.read_eagerly); whether it
    was. The others it does not compute stay pending (registered again)."""
    if not run.read_eagerly(_pending_bases(storages)):
        return False
    for st in storages:
        if st.base.data is None:
            if st is not storages[0]:
                _register(st)
        else:
            st.prior = None  # computed eagerly: it cannot fail now
    return True


def _cpu_alias(t: torch.Tensor, condition: bool = False) -> torch.Tensor:
    """A CPU tensor with ``t``'s exact size, stride and offset, sharing device data.
    Read-only: device data is immutable. ``condition``: read for a Python
    branch (one bool; see run.execute)."""
    if t.numel() == 0:  # no data to compute: nothing is synced
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    st = state(t)
    s = st.storage
    if s.base.data is None:
        # With nothing running, a read cuts the trace: what it needs and
        # everything else pending, in one graph (the same at every step of a
        # loop that reads, as a decode loop's stopping check), so that no
        # trace grows past it. While a step runs (mark_step), a read in the
        # middle of the next one (Hugging Face's attention-mask checks)
        # computes its own value, ahead of that step when it can, without
        # waiting for it. A condition that is a few small ops runs eagerly.
        complete = run.idle()
        storages = [s] + _device.take_pending() if complete else [s]
        if not (condition and _read_eagerly(storages)):
            _sync(storages, now=True, condition=condition, complete=complete)
    run.wait(s.base)
    if _steps:
        _prune()
    base = s.base.data
    m = s.meta
    stride = m.stride()
    if base.stride() != stride:
        # Device data is dense in the memory format eager gives the value, which
        # is normally the storage's (channels_last stays NHWC); the view chain
        # needs the storage's exact strides.
        if all(a == b or n == 1 for n, a, b in zip(m.shape, base.stride(), stride)):
            base = base.as_strided(m.shape, stride)  # differs in size-1 dimensions only
        else:
            base = torch.empty_strided(m.shape, stride, dtype=m.dtype).copy_(base)
    chain = st.chain
    if base.storage_offset() and any(step.op in ADDRESSES_STORAGE for step in chain):
        # as_strided counts from the start of the storage, which device data
        # (a view an eager op returned) need not begin at.
        base = base.clone()
    for op, rest, kwargs, _, _ in chain:
        base = op(base, *rest, **kwargs)
    return base


def _to_cpu(t: torch.Tensor) -> torch.Tensor:
    """A private CPU copy of ``t`` (what ``t.cpu()`` returns), autograd-free."""
    return aten._to_copy.default(_cpu_alias(t))


def mark_step() -> None:
    """Cut the trace: start executing everything live tensors still need (on the
    worker: this returns at once on a cache hit), so they hold device data, and
    start the next trace empty."""
    metrics.counter("MarkStep")
    _sync(_device.take_pending(), complete=True)


def kernel_count(tensor: torch.Tensor = None):
    """Kernels (loop nests after fusion and tiling) of a compiled graph: of the
    one that computed ``tensor`` (computing it first if it is pending), or
    without an argument, of the last graph run (compiled or from the cache).
    None when that graph ran eagerly, or the tensor's value did not come from a
    graph (user data, an op run eagerly).  Every compilation also records its
    count as the sample metric ``KernelCount``."""
    if tensor is None:
        return run.last_kernels
    st = state(tensor)
    if st is None:
        raise TypeError("kernel_count: not a lazy tensor")
    s = st.storage
    _sync((s,))
    return s.base.kernels


def sync(tensors: List[torch.Tensor]) -> None:
    """Compute the given lazy tensors now, in one graph."""
    _sync([st.storage for st in map(state, tensors) if st is not None])


def empty_cache() -> int:
    """Return the memory the runtime's buffer pool holds idle (outputs and
    temporaries freed by earlier steps, kept for reuse) to the system, after
    the graphs already submitted finish; returns how many bytes.  Like
    ``torch.cuda.empty_cache()``: memory in use is not affected, and the
    next steps page fresh blocks in again."""
    run.wait_device_ops()
    native = entries.native_compiler()
    return 0 if native is None else native.trim_buffer_pool()
