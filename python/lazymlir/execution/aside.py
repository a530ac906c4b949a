"""Large graphs compiled in a child process while they run eagerly.

Lowering and compiling a 12-layer transformer's training step takes tens of
seconds on a small host (issue 49: BERT-base's first two steps took 85 s,
eager's 11-14 s). A graph of at least ``config.compile_aside_ops`` traced ops
that is not in the disk cache becomes a :class:`Pending` entry instead: it
runs eagerly (the FX module of the trace, as a compile fallback does) and,
from its third run on (a graph run once or twice never pays for a compile,
and a training loop's first two steps keep the CPU: since the first step's
graph is the next steps', a child started at the second run slowed BERT-base's
first two steps from 10 to 13 s), a child
process (:func:`child`) lowers and compiles it with
the parent's options and writes the disk cache. The first run after the
child finished loads the compiled graph from there (``compilation.finish_aside``).

Why a process and not a thread: the lowering is Python (make_fx, torch-mlir's
FX importer) and would take the GIL from the thread that traces and runs the
eager ops, stalling it at every op; the child also keeps the compiler's
memory (about 1 GiB for BERT-base) out of the user's process, and a compiler
crash costs the compile, not the user's process. One child at a time (each
compiles on every core), niced so that the steps keep most of the CPU; the next is
the waiting graph that ran most often. Children still running at exit are
stopped (the disk cache's writes are atomic).

The child gets the graph as data (:func:`encode`: FX nodes with their ops
named, never pickled code), the inputs as shapes, strides and dtypes (the
lowering traces fake tensors), the configuration and the compile options,
and answers with a JSON result file.
"""

import atexit
import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import torch

from .. import config, metrics
from . import cache
from .entries import Donating, run_fx

# How much the child yields the CPU to the process that runs the steps (an
# os.nice increment). BERT-base on a 2-core Zen 4 (NOTES 30): at 0 the
# compile took 37 s and the eager steps beside it 11-13 s; at 5, 63 s and
# 6-7 s; at 10 it had not finished after 75 s of 5.5 s steps. 0 and 5 had
# run the same 14 steps in the same time.
_NICE = 5


# ---------------------------------------------------------------------------
# The graph as data


class _Ref:
    """An FX node, by its index in the graph."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __getstate__(self):
        return self.index

    def __setstate__(self, index):
        self.index = index


def _target_name(target):
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.namespace, target._opname, target._overloadname)
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module is None or qualname is None or "<" in qualname:
        raise TypeError(f"cannot name the FX target {target!r}")
    return ("py", module, qualname)


def _target(name):
    if isinstance(name, str):
        return name
    if name[0] == "op":
        _, namespace, op, overload = name
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    value = importlib.import_module(name[1])
    for part in name[2].split("."):
        value = getattr(value, part)
    return value


def _map(a, leaf):
    """``a`` with ``leaf`` applied to everything in it that is not a tuple,
    list, dict or slice."""
    if isinstance(a, tuple):
        return tuple(_map(x, leaf) for x in a)
    if isinstance(a, list):
        return [_map(x, leaf) for x in a]
    if isinstance(a, dict):
        return {k: _map(v, leaf) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(_map(a.start, leaf), _map(a.stop, leaf), _map(a.step, leaf))
    return leaf(a)


def encode(gm: torch.fx.GraphModule) -> bytes:
    """``gm``'s graph as bytes for :func:`decode`: each node's kind, target
    (an op's name, a function's module and name), arguments with nodes as
    indices, and the dtypes the tracer recorded (the lowering reads them).
    Raises TypeError for a target that has no importable name."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}

    def arg(a):
        return _map(a, lambda x: _Ref(index[x]) if isinstance(x, torch.fx.Node) else x)

    rows = [
        (n.op, n.name, _target_name(n.target), arg(n.args), arg(n.kwargs), n.meta.get("lazymlir_dtypes")) for n in nodes
    ]
    return pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    made: List[torch.fx.Node] = []

    def arg(a):
        return _map(a, lambda x: made[x.index] if isinstance(x, _Ref) else x)

    for op, name, target, args, kwargs, dtypes in pickle.loads(data):
        if op == "placeholder":
            node = g.placeholder(name)
        elif op == "output":
            node = g.output(arg(args[0]))
        else:
            node = g.create_node(op, _target(target), arg(args), arg(kwargs), name=name)
        if dtypes is not None:
            node.meta["lazymlir_dtypes"] = dtypes
        made.append(node)
    return torch.fx.GraphModule({}, g)


# ---------------------------------------------------------------------------
# Pending graphs and their children


class Job:
    """A child process compiling one graph."""

    def __init__(self, pending: "Pending"):
        self.pending = pending
        self.proc: Optional[subprocess.Popen] = None
        self.job_path = self.result_path = None
        self.log = None
        self.error = None  # why no child could start

    def start(self) -> None:
        p = self.pending
        job = {
            "graph": encode(p.gm),
            "inputs": p.inputs,
            # Full code generation effort at once: the child is off the
            # steps' path, and a tier-up in the user's process (after 4
            # runs) took 0.39 GiB more at once there (BERT-base: 3.23 ->
            # 3.62 GiB peak) and CPU from the steps.
            "options": dict(p.options, tiered=False),
            "pairs": p.donated,
            "record": p.record,
            "config": config.snapshot(),
        }
        fd, path = tempfile.mkstemp(prefix="lazymlir-aside-", suffix=".job")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.job_path = path
        self.result_path = path[: -len(".job")] + ".json"
        self.log = tempfile.TemporaryFile(prefix="lazymlir-aside-", suffix=".log")
        self.proc = subprocess.Popen(
            command() + [path, self.result_path],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            close_fds=True,
        )
        metrics.counter("CompileAsideStarted")
        if config.verbose:
            print(f"lazymlir: compiling graph {p.name} ({p.ops} ops) in child process {self.proc.pid}")

    def finished(self) -> bool:
        return self.error is not None or (self.proc is not None and self.proc.poll() is not None)

    def wait(self) -> None:
        if self.proc is not None and self.error is None:
            self.proc.wait()

    def result(self) -> dict:
        """The child's answer: {"status": "ok", "graph": cache key,
        "donated": bool, "seconds": {...}}, {"status": "lowering" or
        "failed", "message": ...}, or "crashed" (no answer) with the exit
        status and the end of its output."""
        try:
            with open(self.result_path) as f:
                answer = json.load(f)
        except (OSError, ValueError):
            self.log.seek(0)
            tail = self.log.read()[-4000:].decode(errors="replace")
            answer = {"status": "crashed", "message": f"exit status {self.proc.returncode}: {tail}"}
        finally:
            for path in (self.job_path, self.result_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            self.log.close()
        return answer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def command() -> List[str]:
    """How a child is started (its job file and result file follow)."""
    return [sys.executable, "-c", "import sys; from lazymlir.execution import aside; aside.child(*sys.argv[1:])"]


class Pending(Donating):
    """A graph that runs eagerly while a child compiles it."""

    __slots__ = (
        "name", "gm", "out_specs", "ops", "inputs", "options", "record", "runs", "job",
    )  # fmt: skip
    kernel_count = None
    counter = "EagerWhileCompiling"

    def __init__(self, name, gm, out_specs, ops, inputs, options, pairs, uses, record):
        self.name = name
        self.gm = gm
        self.out_specs = out_specs
        self.ops = ops
        self.inputs = inputs  # (shape, stride, dtype) of each input
        self.options = options
        self.record = record
        self.runs = 1  # made for a run
        self.job: Optional[Job] = None
        # The (input, output) pairs the compile is asked to donate, and
        # donation.input_uses of them: runs already update donated inputs in
        # place as the compiled graph will (donation.assign, entries.run_fx).
        self.donate(pairs, uses)

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        t0 = time.perf_counter()
        run_fx(self.gm, inputs, outs, self.donated)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)


_running: Optional[Job] = None
_waiting: List[Pending] = []


def note_run(entry: Pending) -> bool:
    """``entry`` runs again: its compile is asked for at its third run.
    Whether its child has finished (then :func:`take` its result)."""
    entry.runs += 1
    if entry.runs >= 3 and entry.job is None and entry not in _waiting:
        _waiting.append(entry)
    _pump()
    return entry.job is not None and entry.job.finished()


def take(entry: Pending) -> dict:
    """The finished child's result for ``entry``."""
    job, entry.job = entry.job, None
    return job.result()


def _pump() -> None:
    """Start the next child when none is running: the waiting graph that ran
    most often (the latest of equals)."""
    global _running
    if _running is not None and not _running.finished():
        return
    if _running is not None and _running.pending.job is not _running:  # its graph was forgotten
        _running.result()  # its files go
    _running = None
    if not _waiting:
        return
    best = max(range(len(_waiting)), key=lambda i: (_waiting[i].runs, i))
    entry = _waiting.pop(best)
    entry.job = Job(entry)
    try:
        entry.job.start()
    except Exception as e:  # a target without a name, no process: its next run compiles it in process
        entry.job.error = f"{type(e).__name__}: {e}"
        if config.verbose:
            print(f"lazymlir: cannot compile graph {entry.name} in a child process: {entry.job.error}")
        return
    _running = entry.job


def wait_all() -> None:
    """Wait until every graph waiting for a compile has one (started in
    turn); their next runs load it."""
    while True:
        _pump()
        if _running is None:
            return
        _running.wait()


def forget() -> None:
    """The memory cache was cleared: no graph waits any more (a running
    child still finishes and fills the disk cache)."""
    _waiting.clear()
    if _running is not None:
        _running.pending.job = None


cache.on_wait_background_compiles(wait_all)
cache.on_clear(forget)


@atexit.register
def _stop_children() -> None:
    _waiting.clear()
    if _running is not None:
        _running.stop()


# ---------------------------------------------------------------------------
# The child


def child(job_path: str, result_path: str) -> None:
    """The child's work: lower and compile the job's graph, write the disk
    cache and the JSON result."""
    try:
        os.nice(_NICE)
    except OSError:
        pass
    with open(job_path, "rb") as f:
        job = pickle.load(f)
    os.unlink(job_path)
    from ..lowering import linalg, LoweringError
    from .entries import compile_linalg_donating, configure_disk_cache, require_native

    config.apply(job["config"])
    answer = {}
    t0 = time.perf_counter()
    gm = decode(job["graph"])
    inputs = [torch.empty_strided(shape, stride, dtype=dtype) for shape, stride, dtype in job["inputs"]]
    native = require_native()
    configure_disk_cache(native)
    try:
        lowered = linalg.lower(gm, inputs)
    except LoweringError as e:
        answer = {"status": "lowering", "message": str(e)}
    else:
        t1 = time.perf_counter()
        try:
            executable, pairs = compile_linalg_donating(native, lowered.linalg, job["options"], job["pairs"])
        except Exception as e:
            answer = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
        else:
            if pairs or not job["pairs"]:  # a refused donation keeps no record under the donating key
                cache.write_record(native, job["record"], executable.cache_key)
            t2 = time.perf_counter()
            answer = {
                "status": "ok",
                "graph": executable.cache_key,
                "donated": bool(pairs),
                "seconds": {"lowering": t1 - t0, "compile": t2 - t1},
            }
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, result_path)
