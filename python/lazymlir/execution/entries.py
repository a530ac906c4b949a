"""What a traced graph becomes once compiled, and what every compile shares:
the native compiler (loaded at the first compile), a :class:`Compiled`
executable, an :class:`Eager` FX graph run op by op (a graph that cannot
compile, with the reason as a counter) or a :class:`Split` (ops that do not
lower, computed eagerly first); the compile options, lock and metrics, and
the listeners told of lowered graphs and of ops that do not lower.
``compilation`` compiles a trace into one of these, ``tierup`` its static
and dynamic variants; ``run.execute`` caches and runs them."""

import atexit
import functools
import threading
import time
import warnings
from typing import Callable, List

import torch

from .. import _device, config, metrics
from . import cache
from .eager_fx import run_fx

aten = torch.ops.aten


# The native compiler (lazymlir.execution.native over the C++ build), imported at the
# first compilation: the tracer, the lowering and eager execution work without it.
_compiler = None
_compiler_import_error = None


def native_compiler():
    """The lazymlir.execution.native module, or None when the native build is
    missing."""
    global _compiler, _compiler_import_error
    if _compiler is None and _compiler_import_error is None:
        try:
            from . import native

            # Output buffers come from the runtime's pool, made into torch
            # tensors by the device's C++ (run.output_buffer), and the
            # device's replay of a compiled step calls the runtime directly
            # (run.replay).
            _, release, eager, output, ready = native.buffer_pool_functions()
            _device.set_buffer_pool(release, eager, output, ready)
            _device.set_run_function(native.raw_run_function())
            _compiler = native
            # The background compiler stops before the interpreter (and the
            # C++ runtime) shuts down.
            atexit.register(native.stop_background_compiles)
        except ImportError as e:
            _compiler_import_error = str(e)
    return _compiler


def require_native():
    """The native compiler; raises RuntimeError saying why it is missing."""
    native = native_compiler()
    if native is None:
        raise RuntimeError(f"the native compiler is not available ({_compiler_import_error})")
    return native


class Donating:
    """An entry whose runs write some outputs into their inputs' buffers:
    ``donated``, (input, output) pairs, each output written into its
    input's buffer, which the run donates or fills with a copy
    (donation.assign); ``donated_uses``, per pair, the graph's uses of the
    input; ``donated_outputs``, the pairs' outputs (run.execute allocates
    none for them)."""

    __slots__ = ("donated", "donated_uses", "donated_outputs")

    def donate(self, pairs=(), uses=()) -> None:
        self.donated = pairs
        self.donated_uses = uses
        self.donated_outputs = frozenset(j for _, j in pairs)


class Compiled(Donating):
    """A graph compiled by the native compiler: its executable (a
    ``lazymlir._native.CpuExecutable``) and the buffers its results go in;
    the executable's outputs are those not donated."""

    __slots__ = (
        "name",
        "executable",
        "out_specs",
        "checked",
        "gm",
        "dynamic",
        "template",
        "validate",
        "wrong",
        "runs",
    )

    def __init__(self, name, executable, out_specs, gm):
        self.name = name  # the graph's hash (dumps, the profiler)
        self.executable = executable
        # (shape, dtype) of each result; None for a dynamic graph, whose
        # results' shapes are each trace's (ir.Graph.output_specs).
        self.out_specs = out_specs
        self.dynamic = executable.is_dynamic
        # A dynamic graph's lazymlir.trace.template.Template (its phantom inputs).
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
        self.donate()

    @property
    def kernel_count(self) -> int:
        return self.executable.kernel_count

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        """The native run releases the GIL; ``background``: on the worker."""
        t0 = time.perf_counter()
        exe = self.executable
        if self.wrong:
            run_fx(self.gm, inputs, outs, self.donated)
            metrics.timing("ExecuteTime", time.perf_counter() - t0)
            return
        args, results = inputs, outs
        if self.donated:
            # A donated output is its input's buffer (donated) or a new one
            # holding the old value (copied): the executable updates it.
            args = list(inputs)
            for i, j in self.donated:
                if outs[j] is not inputs[i]:
                    _device.output_ready(outs[j])
                    outs[j].copy_(inputs[i])
                args[i] = outs[j]
            results = [o for j, o in enumerate(outs) if j not in self.donated_outputs]
        try:
            if self.checked:
                _compiler.run_allocated(exe, args, results, background=background, dynamic=self.dynamic)
            else:
                exe.run(args, results, background=background)
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
            run_fx(self.gm, inputs, outs, self.donated)
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


class Eager(Donating):
    """A graph run op by op on CPU; ``counter`` says why (for the metrics).
    Like a compiled graph it updates donated inputs in place (``donate``):
    a training step that cannot compile holds its state once, not twice."""

    __slots__ = ("name", "gm", "counter", "out_specs")
    kernel_count = None

    def __init__(self, name, gm, counter, out_specs):
        self.name = name
        self.gm = gm
        self.counter = counter
        self.out_specs = out_specs
        self.donate()

    def run_into(self, inputs: List[torch.Tensor], outs: List[torch.Tensor], background: bool) -> None:
        t0 = time.perf_counter()
        run_fx(self.gm, inputs, outs, self.donated)
        metrics.timing("ExecuteTime", time.perf_counter() - t0)


# Called with the linalg.unsupported_key (op, configuration) of each op found
# not to lower alone, or (op, input dtypes) from torch.compile's regions
# (ops.py makes it run eagerly for that configuration, or those dtypes).
unsupported_op_listeners: List[Callable] = []

# Called with (graph name, ir.Graph, linalg text) for each graph lowered
# for the native compiler (lazymlir.gpu.aot compiles them for a GPU too); while
# any is registered, graphs are lowered even when the disk cache holds them.
lowered_graph_listeners: List[Callable] = []


class Split:
    """What compilation.compile_graph returns for a graph that holds ops that do not lower
    alone (found by linalg.find_unsupported); not cached."""

    __slots__ = ("ops",)

    def __init__(self, ops):
        self.ops = ops


def note_compile(stats: dict, disk: bool) -> None:
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


def configure_disk_cache(native) -> bool:
    """Gives the native compiler the current disk cache settings (they may
    change with config.patch); whether the disk cache is on."""
    global _disk_config
    wanted = (config.cache_dir or "", config.cache_max_bytes)
    if wanted != _disk_config:
        native.configure_disk_cache(*wanted)
        _disk_config = wanted
    return bool(wanted[0])


def compile_options() -> dict:
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


def compile_linalg_donating(native, linalg: str, options: dict, pairs):
    """The graph compiled, with the inputs of ``pairs`` donated to their
    outputs unless the compiler refuses them (a runtime check after the
    first write into a donated input, an update it cannot tie to its
    input): then it is compiled without. (executable, the pairs it donates)."""
    compile = functools.partial(
        native.compile_linalg, linalg, keep_llvm_dialect=bool(config.dump_dir), profile=config.profile, **options
    )
    if pairs:
        try:
            return compile(donate=[index for pair in pairs for index in pair]), pairs
        except native.CompileError as e:
            metrics.counter("DonationRefused")
            if config.verbose:
                print(f"lazymlir: compiling without donated inputs: {str(e)[:500]}")
    return compile(), ()


# torch-mlir and the native compiler work for one graph at a time: the
# tracing thread's compiles and the static tier-up thread's.
compile_lock = threading.RLock()
