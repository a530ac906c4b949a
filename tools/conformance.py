#!/usr/bin/env python3
"""Conformance sweep: PyTorch's OpInfo database through the lazy device.

Every op of ``torch.testing._internal.common_methods_invocations.op_db`` runs
its sample inputs twice, on lazy tensors and eagerly on the CPU, and the
results are compared with ``torch.testing.assert_close`` (``equal_nan=True``)
at the OpInfo's own tolerances for the dtype (``tolerance``), else at
assert_close's defaults for the dtype.

Samples: float32 for every op, int64, bool, bfloat16 and float16 for the ops
whose CPU dtypes include them; by default the first ``--samples`` (3) of each
dtype, generated under a fixed seed, so that every run (and a run of older
code) sweeps the same samples.  ``--samples 0`` takes them all (hours on two
cores).  The totals are kept per dtype; the float32, int64 and bool ones
(``BASELINE_DTYPES``) compare with sweeps from before bfloat16 and float16
were swept.

Each sample gets one class (``CLASSES``):

- ``compiled-equal``: equal to eager, and its graphs were compiled (the
  ``UncachedCompile``/``CachedCompile`` counters rose) with no ``aten::``
  fallback and no graph run eagerly (``EAGER_GRAPH_COUNTERS``);
- ``fallback-equal``: equal, through an eager fallback (an ``aten::`` counter
  or a graph run eagerly);
- ``no-graph-equal``: equal, with nothing to compile or fall back from (views,
  metadata, empty results);
- ``mismatch``: the results differ (reason: assert_close's first line and
  greatest absolute difference);
- ``error``: the lazy run raised and eager did not (reason: first line);
- ``crash``: the worker died on the sample (reason: the signal);
- ``timeout``: the sample ran longer than ``--timeout`` seconds;
- ``eager-error``: eager raises on the sample itself (not compared), e.g.
  the CUDA-only jiterator ops, or the op's samples cannot be made on the CPU;
- ``skipped-random``: a random op, or one returning uninitialized memory
  (``RANDOM_OPS``), whose lazy and eager results differ although both ran
  under the same seed (lazymlir draws random numbers from the CPU generator,
  so seeded random ops do compare equal).

Every tensor of a sample (input, args, kwargs, recursively) moves to the lazy
device, also the few that PyTorch wants on the CPU whatever the device (e.g.
``tensor_split``'s tensor of indices): such samples show as ``error``.
``torch._lazy.mark_step``/``wait_device_ops``, which OpInfo's
``wrapper_set_seed`` calls on lazy outputs, are routed to lazymlir's.

Crash isolation: ops run in ``--jobs`` worker processes, one op at a time;
they are spawned, not forked, so none inherits lazymlir's worker thread or
torch's thread pools.
A worker that dies or times out is replaced, its sample is classified
``crash``/``timeout``, and the op goes on from the next sample.

``--out-json`` writes the per-op results (counts per class, and each failing
sample's dtype, index, class and reason), ``--out-md`` a Markdown summary;
the totals table is printed.  ``make conformance`` runs the default sweep and
writes ``docs/conformance/results.json`` and ``docs/conformance/summary.md``.
``--subset`` sweeps ``SUBSET`` (a few samples of each op family; bfloat16 and
float16 for ``SUBSET_LOW_PRECISION`` only), as
``test/python/test_conformance.py`` does in ``make test``.
"""

import argparse
import collections
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import time
from typing import Dict, Iterable, List, Optional, Tuple

CLASSES = (
    "compiled-equal",
    "fallback-equal",
    "no-graph-equal",
    "mismatch",
    "error",
    "crash",
    "timeout",
    "eager-error",
    "skipped-random",
)
EQUAL = ("compiled-equal", "fallback-equal", "no-graph-equal")
# Samples compared with eager: the equal ones and the failures.
COMPARED = EQUAL + ("mismatch", "error", "crash", "timeout")
FAILURES = ("mismatch", "error", "crash", "timeout")

DTYPES = ("float32", "int64", "bool", "bfloat16", "float16")
# The dtypes swept before bfloat16 and float16 (the baselines hold only these).
BASELINE_DTYPES = ("float32", "int64", "bool")
LOW_PRECISION_DTYPES = ("bfloat16", "float16")

# lazymlir's counters for a graph that ran eagerly instead of compiled (see
# lazymlir.metrics and runtime): it failed to compile, was run eagerly on
# purpose (force-eager, an unsupported dtype, a zero-size tensor), or its
# compiled run failed a runtime check and eager recomputed it.
EAGER_GRAPH_COUNTERS = ("CompileFallback", "EagerGraph", "ZeroSizeGraph", "RuntimeCheckEagerRerun")

# Ops whose results depend on the random generator (or on uninitialized
# memory): seeded comparison is tried, and a difference is `skipped-random`.
RANDOM_OPS = re.compile(
    r"^(rand|randn|randint|rand_like|randn_like|randint_like|normal|bernoulli|multinomial"
    r"|uniform|cauchy|exponential|geometric|log_normal)$|dropout|rrelu|empty"
)

# The fast subset: (op key, samples per dtype), a few samples of each family.
SUBSET = (
    # elementwise unary / binary (int64 and bool samples where the op takes them)
    ("abs", 1),
    ("exp", 1),
    ("sigmoid", 1),
    ("nn.functional.relu", 1),
    ("neg", 1),
    ("add", 2),
    ("mul", 2),
    ("sub", 1),
    ("div.no_rounding_mode", 1),
    ("maximum", 1),
    ("logical_and", 1),
    ("bitwise_and", 1),
    # reductions
    ("sum", 2),
    ("mean", 1),
    ("amax", 1),
    ("argmax", 1),
    # matmul / linear
    ("mm", 1),
    ("bmm", 1),
    ("addmm", 1),
    ("nn.functional.linear", 1),
    # convolution / pooling
    ("nn.functional.conv2d", 2),
    ("nn.functional.max_pool2d", 1),
    # indexing
    ("index_select", 2),
    ("gather", 1),
    ("take_along_dim", 1),
    # views / reshapes
    ("reshape", 1),
    ("permute", 1),
    ("transpose", 1),
    ("narrow", 1),
    ("expand", 1),
    # softmax / norms
    ("softmax", 2),
    ("log_softmax", 1),
    ("nn.functional.layer_norm", 1),
    # comparison / where / clamp
    ("eq", 1),
    ("lt", 1),
    ("where", 1),
    ("clamp", 1),
    # cat / stack
    ("cat", 1),
    ("stack", 1),
)
# The subset's ops that also run in bfloat16 and float16 (the others: float32,
# int64 and bool only), one or two of each family.
SUBSET_LOW_PRECISION = (
    "exp",
    "sigmoid",
    "add",
    "mul",
    "sum",
    "mean",
    "mm",
    "addmm",
    "nn.functional.conv2d",
    "index_select",
    "softmax",
    "nn.functional.layer_norm",
    "where",
)

TIMEOUT_S = 120.0


def op_key(op) -> str:
    """An OpInfo's unique name: ``name`` or ``name.variant_test_name``."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_ops() -> Dict[str, object]:
    """The OpInfos of op_db by key (imports op_db: needs ``expecttest``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


def op_dtypes(op, dtypes: Iterable[str] = DTYPES) -> List[str]:
    """The dtypes (names, from ``dtypes``) the op's samples are taken in."""
    import torch

    supported = op.supported_dtypes("cpu")
    return [name for name in dtypes if getattr(torch, name) in supported]


def subset_dtypes(ops: Dict[str, object]) -> Dict[str, List[str]]:
    """The dtypes of each ``SUBSET`` op: bfloat16 and float16 only for
    ``SUBSET_LOW_PRECISION``."""
    return {
        key: op_dtypes(
            ops[key], DTYPES if key in SUBSET_LOW_PRECISION else [d for d in DTYPES if d not in LOW_PRECISION_DTYPES]
        )
        for key, _ in SUBSET
    }


def tolerance(op, dtype) -> Dict[str, float]:
    """The OpInfo's tolerances for ``dtype`` as assert_close keywords, as
    PyTorch's own tests take them: the loosest of its ``toleranceOverride``s
    (atol, rtol) and ``precisionOverride``s (atol) for the dtype, each at
    least assert_close's default for the dtype (``{}``: no override, the
    defaults, which assert_close picks per result dtype)."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    default_rtol, default_atol = default_tolerances(dtype)
    atol = rtol = None
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, "cpu"):  # another device's
            continue
        for decorator in getattr(info, "decorators", (info,)):
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                tol = decorator.d[dtype]
                atol = max(atol or default_atol, tol.atol)
                rtol = max(rtol or default_rtol, tol.rtol)
            elif isinstance(decorator, precisionOverride) and dtype in decorator.d:
                atol = max(atol or default_atol, decorator.d[dtype])
                rtol = rtol or default_rtol
    return {} if atol is None else {"atol": atol, "rtol": rtol}


def samples(op, dtype_name: str, limit: int) -> list:
    """The op's first ``limit`` (0: all) CPU samples of a dtype, generated
    under a fixed seed so that every run sweeps the same ones."""
    import torch

    torch.manual_seed(0)
    out = []
    for sample in op.sample_inputs("cpu", getattr(torch, dtype_name), requires_grad=False):
        out.append(sample)
        if limit and len(out) == limit:
            break
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _mismatch_reason(exc: BaseException) -> str:
    """assert_close's first line plus its greatest absolute difference."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    for line in lines[1:]:
        if line.startswith(("Greatest absolute difference", "Absolute difference")):
            reason += " " + line
            break
    return reason[:300]


def _to_cpu(value):
    """Results brought back to the CPU (tensors, recursively in sequences)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*map(_to_cpu, value))
    if isinstance(value, (list, tuple)):
        return type(value)(map(_to_cpu, value))
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _to_lazy(value):
    """A sample's tensor on the lazy device. A view of a larger storage
    (OpInfo's partial views: ``base[5:15]``) takes its whole storage along and
    is viewed again there, as a sample made on the device would be:
    ``.to("lazy")`` would copy the view's elements alone, and ops that address
    the storage (as_strided with a storage offset) would then see another
    storage than eager's."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    if value.layout == torch.strided and value.device.type == "cpu" and value.numel() > 0:
        storage = value.untyped_storage()
        size = value.element_size()
        if (value.storage_offset() != 0 or storage.nbytes() != value.numel() * size) and storage.nbytes() % size == 0:
            with torch.no_grad():
                base = torch.empty(0, dtype=value.dtype).set_(storage, 0, (storage.nbytes() // size,))
                view = base.to("lazy").as_strided(value.shape, value.stride(), value.storage_offset())
            return view.requires_grad_() if value.requires_grad else view
    return value.to("lazy")


def route_torch_lazy() -> None:
    """Make ``torch._lazy.mark_step``/``wait_device_ops`` (which OpInfo's
    ``wrapper_set_seed`` calls on lazy outputs) lazymlir's."""
    import torch._lazy

    import lazymlir

    torch._lazy.mark_step = lambda device="", wait=False: lazymlir.mark_step()
    torch._lazy.wait_device_ops = lambda devices=None: lazymlir.wait_device_ops()


def _graph_class() -> str:
    """compiled-equal, fallback-equal or no-graph-equal, from the metrics
    since the last reset."""
    from lazymlir import metrics

    compiled = metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")
    if _fallbacks():
        return "fallback-equal"
    return "compiled-equal" if compiled else "no-graph-equal"


def _fallbacks() -> List[str]:
    """The fallback counters raised since the last reset."""
    from lazymlir import metrics

    names = metrics.executed_fallback_ops()
    return names + [n for n in EAGER_GRAPH_COUNTERS if metrics.counter_value(n)]


def _settle() -> None:
    """Finish whatever a previous sample left running and clear the metrics."""
    import lazymlir

    try:
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
    except Exception:
        pass
    lazymlir.metrics.reset()


def run_sample(op, sample, dtype) -> Tuple[str, str, List[str]]:
    """Run one sample lazily and eagerly: (class, reason, fallback counters)."""
    import torch

    random_op = bool(RANDOM_OPS.search(op.name))
    _settle()
    lazy_exc = None
    torch.manual_seed(0)
    try:
        lazy_sample = sample.transform(_to_lazy)
        actual = sample.output_process_fn_grad(op(lazy_sample.input, *lazy_sample.args, **lazy_sample.kwargs))
        actual = _to_cpu(actual)
    except Exception as exc:  # the op's own failure, classified below
        lazy_exc = exc
    fallbacks = _fallbacks()
    graph_class = _graph_class()
    torch.manual_seed(0)
    try:
        expected = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    except Exception as exc:
        return "eager-error", _first_line(exc), fallbacks
    if lazy_exc is not None:
        return "error", _first_line(lazy_exc), fallbacks
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance(op, dtype))
    except Exception as exc:
        return ("skipped-random" if random_op else "mismatch"), _mismatch_reason(exc), fallbacks
    return graph_class, "", fallbacks


# ----------------------------------------------------------------------------
# Workers.  A worker takes tasks (op key, dtype names, samples per dtype, the
# (dtype, index) to resume after) from its pipe and answers, per sample,
# ("start", dtype, index) before running it and ("result", dtype, index,
# class, reason, fallbacks) after, then ("done",).


def _worker(conn, log_path: str) -> None:
    # MLIR's and torch's diagnostics would drown the table: they go to log_path.
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    import warnings

    warnings.simplefilter("ignore")
    import torch

    import lazymlir

    route_torch_lazy()
    ops = load_ops()
    conn.send(("ready", lazymlir.__file__))
    while True:
        task = conn.recv()
        if task is None:
            return
        key, dtype_names, limit, resume = task
        op = ops[key]
        for dtype_name in dtype_names:
            try:
                op_samples = samples(op, dtype_name, limit)
            except Exception as exc:
                reason = "samples: " + _first_line(exc)
                conn.send(("result", dtype_name, -1, "eager-error", reason, []))
                continue
            for index, sample in enumerate(op_samples):
                if resume is not None and (DTYPES.index(dtype_name), index) <= (
                    DTYPES.index(resume[0]),
                    resume[1],
                ):
                    continue
                conn.send(("start", dtype_name, index))
                try:
                    cls, reason, fallbacks = run_sample(op, sample, getattr(torch, dtype_name))
                except Exception as exc:  # the harness's own failure, not a crash
                    cls, reason, fallbacks = "error", "harness: " + _first_line(exc), []
                conn.send(("result", dtype_name, index, cls, reason, fallbacks))
        conn.send(("done",))


class _Worker:
    """A spawned worker process, the task it runs and its last sign of life."""

    def __init__(self, ctx, log_path: str):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, log_path), daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.task: Optional[tuple] = None
        self.current: Optional[Tuple[str, int]] = None
        self.last = time.monotonic()

    def send(self, task) -> None:
        self.task, self.current, self.last = task, None, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def _death(process) -> str:
    process.join(5)
    code = process.exitcode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"worker exited with status {code}"


def run_sweep(
    keys: Iterable[str],
    limits: Dict[str, int],
    ops_dtypes: Dict[str, List[str]],
    jobs: int = 1,
    timeout: float = TIMEOUT_S,
    worker_log: str = os.devnull,
    log=print,
) -> Dict[str, dict]:
    """Sweep ops in ``jobs`` workers (their output goes to ``worker_log``):
    per op key, its ``counts`` per class, ``by_dtype`` (dtype name -> counts
    per class), ``failures`` ([dtype, index, class, reason]) and
    ``fallbacks`` (the fallback counters its samples raised)."""
    keys = list(keys)
    results = {
        key: {
            "counts": collections.Counter(),
            "by_dtype": collections.defaultdict(collections.Counter),
            "failures": [],
            "fallbacks": set(),
        }
        for key in keys
    }
    queue = collections.deque((key, ops_dtypes[key], limits[key], None) for key in keys)
    ctx = multiprocessing.get_context("spawn")
    workers = [_Worker(ctx, worker_log) for _ in range(max(1, min(jobs, len(keys))))]
    done = 0
    start = time.monotonic()

    def record(key, dtype_name, index, cls, reason, fallbacks=()):
        entry = results[key]
        entry["counts"][cls] += 1
        entry["by_dtype"][dtype_name][cls] += 1
        entry["fallbacks"].update(fallbacks)
        if cls in FAILURES or (cls == "eager-error" and index < 0):
            entry["failures"].append([dtype_name, index, cls, reason])

    def replace(worker, cls, reason):
        """Classify the worker's current sample, replace the worker, and queue
        the rest of its op."""
        nonlocal done
        key, dtype_names, limit, _ = worker.task
        if worker.current is not None:
            record(key, *worker.current, cls, reason)
            queue.appendleft((key, dtype_names, limit, worker.current))
        else:  # died between samples (e.g. generating them): give the op up
            record(key, dtype_names[0], -1, cls, reason)
            done += 1
        where = "{}[{}]".format(*worker.current) if worker.current else "between samples"
        log(f"  {key}: {cls} ({reason}) at {where}")
        worker.kill()
        workers[workers.index(worker)] = _Worker(ctx, worker_log)

    def handle(worker, message):
        nonlocal done
        worker.last = time.monotonic()
        if message[0] == "ready":
            worker.ready = True
            log(f"worker {worker.process.pid}: lazymlir from {message[1]}")
        elif message[0] == "start":
            worker.current = (message[1], message[2])
        elif message[0] == "result":
            record(worker.task[0], *message[1:])
            worker.current = None
        elif message[0] == "done":
            done += 1
            worker.task = None
            if done % 50 == 0:
                log(f"[{done}/{len(keys)} ops, {time.monotonic() - start:.0f} s]")

    while done < len(keys):
        for worker in workers:
            if worker.ready and worker.task is None and queue:
                worker.send(queue.popleft())
        handles = [w.conn for w in workers] + [w.process.sentinel for w in workers]
        multiprocessing.connection.wait(handles, timeout=min(1.0, timeout))
        for worker in list(workers):
            alive = worker.process.is_alive()
            try:  # a dead worker's last messages are still in the pipe
                while worker.conn.poll():
                    handle(worker, worker.conn.recv())
            except (EOFError, OSError):
                alive = False
            if not alive:
                if worker.task is None:
                    if not worker.ready:
                        raise RuntimeError(f"a worker failed to start: {_death(worker.process)}")
                    worker.kill()
                    workers[workers.index(worker)] = _Worker(ctx, worker_log)
                else:
                    replace(worker, "crash", _death(worker.process))
            elif worker.task is not None and time.monotonic() - worker.last > timeout:
                replace(worker, "timeout", f"no result in {timeout:g} s")
    for worker in workers:
        try:
            worker.conn.send(None)
        except OSError:
            pass
        worker.process.join(10)
        worker.kill()
    for entry in results.values():
        entry["failures"].sort(key=lambda f: (DTYPES.index(f[0]), f[1]))
        entry["fallbacks"] = sorted(entry["fallbacks"])
        entry["by_dtype"] = {d: entry["by_dtype"][d] for d in DTYPES if d in entry["by_dtype"]}
    return results


# ----------------------------------------------------------------------------
# Reports.


def totals(results: Dict[str, dict]) -> collections.Counter:
    total = collections.Counter()
    for entry in results.values():
        total.update(entry["counts"])
    return total


def restrict(results: Dict[str, dict], dtypes: Iterable[str]) -> Dict[str, dict]:
    """The results of the samples in ``dtypes`` alone (the ops with any).
    Results without ``by_dtype`` (baselines from before it) are taken whole:
    they hold ``BASELINE_DTYPES`` only."""
    dtypes = tuple(dtypes)
    out = {}
    for key, entry in results.items():
        if "by_dtype" in entry:
            counts = collections.Counter()
            for d in dtypes:
                counts.update(entry["by_dtype"].get(d, {}))
        elif set(BASELINE_DTYPES) <= set(dtypes):
            counts = collections.Counter(entry["counts"])
        else:
            counts = collections.Counter()
        if sum(counts.values()):
            failures = [f for f in entry["failures"] if f[0] in dtypes]
            out[key] = dict(entry, counts=counts, failures=failures)
    return out


def table(results: Dict[str, dict]) -> str:
    """The totals as a Markdown table, with the shares the targets are set on."""
    total = totals(results)
    compared = sum(total[c] for c in COMPARED)
    equal = sum(total[c] for c in EQUAL)
    lines = ["| class | samples | ops |", "| --- | ---: | ---: |"]
    for cls in CLASSES:
        ops = sum(1 for entry in results.values() if entry["counts"].get(cls, 0))
        lines.append(f"| {cls} | {total[cls]} | {ops} |")
    lines.append(f"| **compared** | {compared} | {len(results)} |")
    if compared:
        lines.append(f"| equal / compared | {100.0 * equal / compared:.1f}% | |")
    if equal:
        lines.append(f"| compiled / equal | {100.0 * total['compiled-equal'] / equal:.1f}% | |")
    ran = total["compiled-equal"] + total["fallback-equal"]
    if ran:
        lines.append(f"| compiled / (compiled + fallback) | {100.0 * total['compiled-equal'] / ran:.1f}% | |")
    return "\n".join(lines)


def dtype_table(results: Dict[str, dict]) -> str:
    """A Markdown table of the totals per dtype: samples per class (short
    names), compared and equal, and the ops swept in the dtype."""
    short = {"compiled-equal": "compiled", "fallback-equal": "fallback", "no-graph-equal": "no graph"}
    head = ["dtype", "ops", "compared", "equal"] + [short.get(c, c) for c in CLASSES] + ["equal / compared"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    rows = [(d, restrict(results, (d,))) for d in DTYPES]
    rows.append(("all", results))
    for name, part in rows:
        total = totals(part)
        if not sum(total.values()):
            continue
        compared = sum(total[c] for c in COMPARED)
        equal = sum(total[c] for c in EQUAL)
        share = f"{100.0 * equal / compared:.1f}%" if compared else ""
        cells = [name, len(part), compared, equal] + [total[c] for c in CLASSES] + [share]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def failing_ops(results: Dict[str, dict], heading: str = "###") -> str:
    """Markdown lists of the ops with failures, one per class under a
    ``heading``, one line per op: per dtype, the failing samples' indexes and
    the first one's reason."""
    lines = []
    for cls in FAILURES:
        ops = [(k, e) for k, e in sorted(results.items()) if e["counts"].get(cls, 0)]
        if not ops:
            continue
        lines.append(f"\n{heading} {cls} ({len(ops)} ops)\n")
        for key, entry in ops:
            per_dtype = collections.defaultdict(list)
            for failure in entry["failures"]:
                if failure[2] == cls:
                    per_dtype[failure[0]].append(failure)
            parts = [
                "{}[{}]: {}".format(
                    dtype, ", ".join(str(f[1]) for f in fs), fs[0][3].replace("|", "\\|").replace("\n", " ")
                )
                for dtype, fs in per_dtype.items()
            ]
            lines.append(f"- `{key}` ({entry['counts'][cls]}): " + "; ".join(parts))
    return "\n".join(lines)


def fallback_ops(results: Dict[str, dict], top: int = 25) -> str:
    """A Markdown table of the fallback counters (``aten::<op>`` and
    ``EAGER_GRAPH_COUNTERS``) raised by the most ops."""
    ops_per_counter = collections.Counter()
    for entry in results.values():
        ops_per_counter.update(entry["fallbacks"])
    lines = ["| counter | ops |", "| --- | ---: |"]
    lines += [f"| `{name}` | {n} |" for name, n in ops_per_counter.most_common(top)]
    return "\n".join(lines)


def to_json(results: Dict[str, dict], definition: dict) -> dict:
    return {
        "definition": definition,
        "totals": {cls: totals(results)[cls] for cls in CLASSES},
        "totals_by_dtype": {
            d: {cls: n for cls in CLASSES if (n := totals(restrict(results, (d,)))[cls])} for d in DTYPES
        },
        "ops": {
            key: {
                "counts": {cls: n for cls, n in sorted(entry["counts"].items())},
                "by_dtype": {d: dict(sorted(c.items())) for d, c in entry.get("by_dtype", {}).items()},
                "fallbacks": entry["fallbacks"],
                "failures": entry["failures"],
            }
            for key, entry in sorted(results.items())
        },
    }


def write_json(data: dict, path: str) -> None:
    """Write results with one line per op, so that a review diff shows each op
    whose results changed as one changed line."""
    with open(path, "w") as f:
        f.write("{\n")
        for name in ("definition", "totals", "totals_by_dtype"):
            f.write(f' "{name}": {json.dumps(data[name])},\n')
        f.write(' "ops": {\n')
        f.write(",\n".join(f"  {json.dumps(key)}: {json.dumps(e)}" for key, e in data["ops"].items()))
        f.write("\n }\n}\n")


def from_json(data: dict) -> Dict[str, dict]:
    """Results as ``run_sweep`` returns them, from a JSON file's content."""
    return {
        key: {
            "counts": collections.Counter(entry["counts"]),
            **(
                {"by_dtype": {d: collections.Counter(c) for d, c in entry["by_dtype"].items()}}
                if "by_dtype" in entry
                else {}
            ),
            "failures": entry["failures"],
            "fallbacks": entry["fallbacks"],
        }
        for key, entry in data["ops"].items()
    }


def summary(results: Dict[str, dict], definition: dict, before: Optional[Tuple[str, Dict[str, dict]]]) -> str:
    """The Markdown summary: totals per dtype, the totals of
    ``BASELINE_DTYPES`` and of the low-precision dtypes, the failing ops, the
    fallback counters, and ``before`` ((file name, results) of a baseline) as
    "Before"."""
    low = restrict(results, LOW_PRECISION_DTYPES)
    parts = [
        "# Conformance sweep: PyTorch OpInfo samples on the lazy device",
        "",
        "Written by `make conformance` (`tools/conformance.py`); per-op results in",
        "`results.json`. Samples: " + definition["samples"] + ".",
        "Compared with `torch.testing.assert_close(equal_nan=True)` at the OpInfo's",
        "CPU tolerance overrides for the dtype, else assert_close's defaults (bfloat16:",
        "rtol 1.6e-2, atol 1e-5; float16: 1e-3, 1e-5; float32: 1.3e-6, 1e-5).",
        "",
        "## Totals per dtype",
        "",
        dtype_table(results),
        "",
        "## Totals: " + ", ".join(BASELINE_DTYPES),
        "",
        "The dtypes of the baseline (see Before):",
        "",
        table(restrict(results, BASELINE_DTYPES)),
        "",
    ]
    if low:
        parts += ["## Totals: " + ", ".join(LOW_PRECISION_DTYPES), "", table(low), ""]
    parts += [
        "## Ops with failures",
        failing_ops(results) or "\nNone.",
        "",
        "## Fallbacks",
        "",
        "The counters that made equal samples `fallback-equal`, by the number of ops",
        "that raised them (samples with no graph at all, e.g. views, raise none):",
        "",
        fallback_ops(results),
    ]
    if before is not None:
        name, before_results = before
        parts += [
            "",
            "## Before",
            "",
            f"The same sweep over older code, from `{name}`"
            + ("" if any("by_dtype" in e for e in before_results.values()) else " (" + ", ".join(BASELINE_DTYPES) + ")")
            + ":",
            "",
            table(before_results),
            "",
            "### Ops with failures before",
            failing_ops(before_results, heading="####") or "\nNone.",
        ]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated op keys (default: all of op_db)")
    parser.add_argument("--subset", action="store_true", help="the fast subset (SUBSET)")
    parser.add_argument("--samples", type=int, default=3, help="samples per op and dtype (0: all)")
    parser.add_argument("--dtypes", help="comma-separated dtypes, of " + ", ".join(DTYPES) + " (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per sample")
    parser.add_argument("--worker-log", default=os.devnull, help="where the workers' stdout and stderr go")
    parser.add_argument("--out-json", help="write the per-op results here")
    parser.add_argument("--out-md", help="write the Markdown summary here")
    parser.add_argument(
        "--before",
        help="a baseline's results JSON, shown in the summary as 'Before' (if the file exists)",
    )
    args = parser.parse_args(argv)
    import torch

    ops = load_ops()
    if args.subset:
        limits = dict(SUBSET)
    elif args.ops:
        limits = {key: args.samples for key in args.ops.split(",")}
    else:
        limits = {key: args.samples for key in ops}
    unknown = sorted(set(limits) - set(ops))
    if unknown:
        parser.error("unknown ops: " + ", ".join(unknown))
    dtypes = args.dtypes.split(",") if args.dtypes else list(DTYPES)
    if set(dtypes) - set(DTYPES):
        parser.error("unknown dtypes: " + ", ".join(sorted(set(dtypes) - set(DTYPES))))
    ops_dtypes = subset_dtypes(ops) if args.subset else {key: op_dtypes(ops[key]) for key in limits}
    ops_dtypes = {key: [d for d in ds if d in dtypes] for key, ds in ops_dtypes.items()}
    keys = sorted(key for key in limits if ops_dtypes[key])
    definition = {
        "samples": ("the fast subset" if args.subset else f"the first {args.samples or 'all'} samples per op and dtype")
        + " ("
        + ", ".join(dtypes)
        + " where the op takes them on the CPU; seed 0)",
        "torch": torch.__version__,
    }
    print(f"{len(keys)} ops ({len(limits) - len(keys)} without {'/'.join(dtypes)} on the CPU)")
    start = time.monotonic()
    results = run_sweep(keys, limits, ops_dtypes, jobs=args.jobs, timeout=args.timeout, worker_log=args.worker_log)
    elapsed = time.monotonic() - start
    print(dtype_table(results))
    print(failing_ops(results))
    print(f"\n{len(keys)} ops in {elapsed:.0f} s")
    if args.out_json:
        write_json(to_json(results, definition), args.out_json)
    if args.out_md:
        before = None
        if args.before and os.path.exists(args.before):
            with open(args.before) as f:
                before = os.path.basename(args.before), from_json(json.load(f))
        with open(args.out_md, "w") as f:
            f.write(summary(results, definition, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
