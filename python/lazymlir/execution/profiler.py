"""Where the lazy device's run time goes: per kernel of every compiled graph.

``with lazymlir.profile() as p:`` (or ``LAZYMLIR_PROFILE=1`` for the whole
process, printed at exit) compiles graphs with their kernel calls timed
(``lazymlir-instrument-kernels``: each call to an outlined kernel is bracketed
by clock reads in the graph's entry function; kernels themselves are the same
code) and records every graph run and kernel call.  ``p.table()`` sums them
per kernel and call site, sorted by total time: the aten ops the kernel came
from, its operands' shapes, calls, time, and GB/s and GFLOP/s from the bytes
of its operands and an estimate of its floating-point operations (loop trip
counts times the arithmetic ops in the loop body).  ``p.export_chrome_trace``
writes a trace Perfetto (ui.perfetto.dev) and chrome://tracing open.

Profiling is a compile option: graphs seen before run again from instrumented
copies, compiled the first time each runs under the profiler (that compile is
not in the table; kernels compiled before are reused).  Graphs that run
eagerly show as one row each, ``(eager graph)``.

Independently of this module, every graph run shows in ``torch.profiler`` as
a ``lazymlir.graph <hash>`` range, on the thread that runs it: the worker
thread, which torch.profiler records with
``experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True)``
(or run with ``LAZYMLIR_ASYNC=0``).
"""

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Callable, Dict, List, NamedTuple

import torch

from .. import config

# The sessions that record graph runs (empty: not profiling); nested blocks
# and LAZYMLIR_PROFILE's process-wide session each see every run.
active: List["Profile"] = []

# Waits until every graph run started has finished: run.wait_device_ops,
# set by the runtime (which imports this module; this one imports no stage
# above it).
wait_for_runs: Callable[[], None] = lambda: None


class KernelRow(NamedTuple):
    """One line of the table: a kernel at one kind of call site."""

    kernel: str  # the outlined function (__lazymlir_k_<hash>), the runtime GEMM (lazymlir_sgemm_batched), or "(eager graph)"
    ops: str  # the aten ops its loops came from
    shapes: str  # its operands (memref types), or the graph's inputs
    calls: int
    seconds: float  # total
    bytes: int  # per call: the sizes of its operands
    flops: int  # per call: estimated floating-point operations

    @property
    def gb_per_s(self) -> float:
        return self.bytes * self.calls / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflop_per_s(self) -> float:
        return self.flops * self.calls / self.seconds / 1e9 if self.seconds > 0 else 0.0


class Profile:
    """The graph runs and kernel calls recorded while a session was active."""

    def __init__(self):
        self._lock = threading.Lock()
        # (graph name, kind, start ns, end ns, thread id)
        self.graph_runs: List[tuple] = []
        # (graph name, site dict, start ns, end ns, thread id)
        self.kernel_calls: List[tuple] = []
        self._eager_ops: Dict[str, tuple] = {}

    def _record(self, entry, start: int, end: int, events) -> None:
        tid = threading.get_ident()
        kind = type(entry).__name__
        with self._lock:
            self.graph_runs.append((entry.name, kind, start, end, tid))
            if events:
                sites = entry.executable.profile_sites
                for site, s, e in events:
                    self.kernel_calls.append((entry.name, sites[site], s, e, tid))
            elif kind == "Eager" and entry.name not in self._eager_ops:
                nodes = [n for n in entry.gm.graph.nodes if n.op == "call_function"]
                self._eager_ops[entry.name] = (
                    _join(dict.fromkeys(str(n.target) for n in nodes)),
                    _join(
                        str(tuple(n.meta["val"].shape))
                        for n in entry.gm.graph.nodes
                        if n.op == "placeholder" and hasattr(n.meta.get("val"), "shape")
                    ),
                )

    def rows(self) -> List[KernelRow]:
        """Per kernel and call site, sorted by total time (longest first)."""
        timed = [
            ((site["kernel"], site["ops"], site["shapes"], site["bytes"], site["flops"]), e - s)
            for _, site, s, e, _ in self.kernel_calls
        ]
        timed += [
            (("(eager graph)", *self._eager_ops.get(name, ("", "")), 0, 0), e - s)
            for name, kind, s, e, _ in self.graph_runs
            if kind == "Eager"
        ]
        totals = {}
        for key, ns in timed:
            calls, seconds = totals.get(key, (0, 0.0))
            totals[key] = (calls + 1, seconds + ns / 1e9)
        rows = [
            KernelRow(k, ops, shapes, calls, seconds, nbytes, flops)
            for (k, ops, shapes, nbytes, flops), (calls, seconds) in totals.items()
        ]
        return sorted(rows, key=lambda r: -r.seconds)

    def graph_seconds(self) -> float:
        return sum(e - s for _, _, s, e, _ in self.graph_runs) / 1e9

    def table(self, rows: int = 30) -> str:
        """The kernels sorted by total time, the top ``rows`` of them, then
        the rest summed, then what the graph runs spent outside kernels."""
        all_rows = self.rows()
        kernel_total = sum(r.seconds for r in all_rows)
        graphs = self.graph_seconds()
        head = (
            f"{'kernel':<16} {'ops':<36} {'shapes':<34} {'calls':>6} {'total ms':>9} {'%':>5} "
            f"{'mean us':>9} {'GB/s':>7} {'GFLOP/s':>8}"
        )
        lines = [
            f"lazymlir profile: {len(self.graph_runs)} graph runs, {len(self.kernel_calls)} kernel calls, "
            f"graphs {graphs * 1e3:.3f} ms, kernels {kernel_total * 1e3:.3f} ms",
            head,
            "-" * len(head),
        ]
        for r in all_rows[:rows]:
            short = r.kernel.replace("__lazymlir_k_", "k_")[:16]
            share = 100 * r.seconds / kernel_total if kernel_total else 0.0
            gflops = f"{r.gflop_per_s:8.2f}" if r.flops else f"{'-':>8}"
            gbs = f"{r.gb_per_s:7.2f}" if r.bytes else f"{'-':>7}"
            lines.append(
                f"{short:<16} {_cut(r.ops, 36):<36} {_cut(r.shapes, 34):<34} {r.calls:>6} "
                f"{r.seconds * 1e3:>9.3f} {share:>5.1f} {r.seconds / r.calls * 1e6:>9.1f} {gbs} {gflops}"
            )
        rest = all_rows[rows:]
        if rest:
            seconds = sum(r.seconds for r in rest)
            lines.append(
                f"{'(' + str(len(rest)) + ' more)':<16} {'':<36} {'':<34} {sum(r.calls for r in rest):>6} "
                f"{seconds * 1e3:>9.3f} {100 * seconds / kernel_total if kernel_total else 0:>5.1f}"
            )
        lines.append(
            f"graph runs outside kernels (entry code, argument passing, eager graphs count as kernels): "
            f"{max(0.0, graphs - kernel_total) * 1e3:.3f} ms"
        )
        return "\n".join(lines)

    def export_chrome_trace(self, path: str) -> None:
        """Write the graph runs and kernel calls as a Chrome trace (JSON):
        Perfetto (ui.perfetto.dev) and chrome://tracing open it."""
        pid = os.getpid()
        events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "lazymlir"}}]
        for name, kind, s, e, tid in self.graph_runs:
            events.append(
                {
                    "ph": "X",
                    "cat": "lazymlir.graph",
                    "name": f"graph {name}",
                    "pid": pid,
                    "tid": tid,
                    "ts": s / 1e3,
                    "dur": (e - s) / 1e3,
                    "args": {"kind": kind.strip("_")},
                }
            )
        for graph, site, s, e, tid in self.kernel_calls:
            events.append(
                {
                    "ph": "X",
                    "cat": "lazymlir.kernel",
                    "name": site["ops"] or site["kernel"],
                    "pid": pid,
                    "tid": tid,
                    "ts": s / 1e3,
                    "dur": (e - s) / 1e3,
                    "args": {
                        "kernel": site["kernel"],
                        "graph": graph,
                        "shapes": site["shapes"],
                        "bytes": site["bytes"],
                        "flops": site["flops"],
                    },
                }
            )
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)


def _join(items) -> str:
    return ", ".join(items)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@contextlib.contextmanager
def profile():
    """Profile the lazy device's graph runs while the block runs: yields a
    :class:`Profile` (``table()``, ``rows()``, ``export_chrome_trace(path)``),
    complete once the block has exited (it waits for the graphs it started)."""
    wait_for_runs()  # runs started before the block are not in it
    session = Profile()
    active.append(session)
    try:
        with config.patch(profile=True):
            yield session
            wait_for_runs()
    finally:
        active.remove(session)


def run(entry, inputs, outs, background: bool) -> None:
    """Run a graph (``entry.run_into``) recording it in the active session
    and as a torch.profiler range when torch.profiler is on."""
    sessions = list(active)
    if torch.autograd.profiler._is_profiler_enabled:
        ctx = torch.autograd.profiler.record_function(f"lazymlir.graph {entry.name}")
    else:
        ctx = contextlib.nullcontext()
    start = time.monotonic_ns()
    with ctx:
        entry.run_into(inputs, outs, background)
    end = time.monotonic_ns()
    if sessions:
        take = getattr(getattr(entry, "executable", None), "take_profile_events", None)
        events = take() if take is not None else None
        for session in sessions:
            session._record(entry, start, end, events)


def _start_for_process() -> None:
    """LAZYMLIR_PROFILE=1: profile the whole process, print the table at exit."""
    session = Profile()
    active.append(session)

    def report():
        try:
            wait_for_runs()
        except Exception:
            pass
        print(session.table(), file=sys.stderr)

    atexit.register(report)


if config.profile:
    _start_for_process()
