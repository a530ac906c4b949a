"""A compiled region of a torch.compile graph (backend.py cuts the graph
into them): its FX module lowered and compiled once, static or with Dynamo's
symbolic sizes as ``?`` dimensions (then its runs check the guards the
lowering recorded and compute their output sizes), cached in memory and on
disk like a lazy trace's graph, and run into pooled output buffers."""

import hashlib
import json
import operator
import time
import warnings
import weakref
from typing import Any, Dict, List, Set

import torch
import torch.fx

from .. import config, metrics
from ..execution import cache, entries, profiler, run, tierup
from ..lowering import linalg, LoweringError


# Every region made, to drop their executables at exit (tensors alive at
# exit keep AOTAutograd's compiled functions, and those the regions).
_regions: "weakref.WeakSet" = weakref.WeakSet()


# (op overload, input dtypes) found not to lower on their own, for this
# process (the lazy device learns them too: entries.unsupported_op_listeners).
_unsupported: Set[tuple] = set()


class _Unsupported(Exception):
    """A region failed to lower and ops were found that do not: cut again."""


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _op_key(node) -> tuple:
    """The key of linalg.unsupported_key: the op and its tensor inputs' dtypes."""
    return (node.target, tuple(_val(a).dtype for a in node.all_input_nodes if isinstance(_val(a), torch.Tensor)))


def _find_unsupported(gm: torch.fx.GraphModule) -> Set[tuple]:
    """The :func:`_op_key` of the ops of ``gm`` that do not lower alone, or
    lower with outputs of other shapes (linalg.distinct_failures: each
    distinct one tried once, on inputs of its shapes and dtypes)."""
    native = entries.native_compiler()

    def fails(node) -> bool:
        graph = torch.fx.Graph()
        examples, env = [], {}
        for a in node.all_input_nodes:
            v = _val(a)
            if isinstance(v, torch.Tensor):
                env[a] = graph.placeholder(f"t{len(examples)}")
                examples.append(_example(v))
            else:
                env[a] = _concrete(v)
        op = graph.call_function(node.target, *torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__))
        op.meta["val"] = _val(node)
        if isinstance(_val(node), torch.Tensor):
            graph.output((op,))
        else:
            outs = []
            for i, v in enumerate(_val(node)):
                if isinstance(v, torch.Tensor):
                    outs.append(graph.call_function(operator.getitem, (op, i)))
                    outs[-1].meta["val"] = v
            graph.output(tuple(outs))
        try:
            probe = torch.fx.GraphModule(torch.nn.Module(), graph)
            executable = native.compile_linalg(linalg.lower(probe, examples).linalg, tiered=True)
            _check_outputs(executable, [o.shape for o in _fake_run(probe, examples)])
        except (LoweringError, native.CompileError):
            return True
        except Exception:  # the probe itself could not run the op: say nothing of it
            pass
        return False

    def key(node):
        if (
            node.op != "call_function"
            or not isinstance(node.target, torch._ops.OpOverload)
            or not isinstance(_val(node), (torch.Tensor, tuple, list))
        ):
            return None
        return _op_key(node)

    return linalg.distinct_failures(gm.graph.nodes, key, fails)


def _check_outputs(executable, shapes) -> None:
    """Raises LoweringError unless the executable's outputs have these shapes
    (a decomposition that computes something else, such as the attention
    weights for a log-sum-exp, would be written out of bounds)."""
    for i, ((_, got), want) in enumerate(zip(executable.outputs, shapes)):
        if len(got) != len(want) or any(g not in (-1, w) for g, w in zip(got, want)):
            raise LoweringError(f"output {i} lowered with shape {list(got)}, not {list(want)}")


def _concrete(value):
    """A size at its hint (the value it had when Dynamo traced)."""
    return value.node.hint if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) else value


def _example(value) -> torch.Tensor:
    """A tensor with ``value``'s dtype and sizes (a symbolic size at its
    hint), for the lowering, which only looks at its metadata."""
    sizes = [s.node.hint if isinstance(s, torch.SymInt) else int(s) for s in value.shape]
    return torch.empty(sizes, dtype=value.dtype)


class _Failed(entries.Eager):
    """A region that failed to compile (cached, so that it is cut in halves
    again without another try): its FX graph, run eagerly."""

    __slots__ = ("error",)


def _fake_run(gm: torch.fx.GraphModule, inputs):
    """``gm``'s outputs computed on fake tensors like ``inputs`` (their shapes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        return list(gm(*[mode.from_tensor(t) for t in inputs]))


class _Region:
    """One compiled region: its executable (a entries.Compiled) and what
    its runs need (the output buffers' dtypes and sizes, or for a dynamic one
    the function computing them from the input sizes)."""

    def __init__(self, gm: torch.fx.GraphModule, inputs: List[Any], last_try: bool):
        _regions.add(self)
        self.gm = gm
        for v in inputs:
            if not isinstance(v, torch.Tensor):  # only size computations have other inputs; they go inside
                raise AssertionError(f"lazymlir: a region's input is not a tensor: {v!r}")
        outputs = [_val(n) for n in next(n for n in gm.graph.nodes if n.op == "output").args[0]]
        self.out_dtypes = [v.dtype for v in outputs]
        self.dynamic = [{d for d, s in enumerate(v.shape) if isinstance(s, torch.SymInt)} for v in inputs]
        self.examples = [_example(v) for v in inputs]
        self.instances: Dict[tuple, Any] = {}  # static regions of a dynamic one, by input sizes
        self.guards = None
        self.sizes_of = None
        self.symbols = None
        self._last_sizes = None
        self.name = None
        if any(self.dynamic):
            self.entry = self._compile_dynamic(last_try)
            if self.entry is None:  # static per size from now on
                self.entry = self._compile_static(self.examples, last_try)
                self.dynamic = None
        else:
            self.dynamic = None
            self.entry = self._compile_static(self.examples, last_try)
        self.specs = [(tuple(int(s) for s in v.shape), v.dtype) for v in outputs] if self.dynamic is None else None
        self.run = self._run_static if self.dynamic is None else self._run_dynamic

    # -- compiling --

    def _key(self, examples, dynamic) -> tuple:
        return (
            "dynamo",
            self.gm.code,
            tuple((tuple(t.shape), t.dtype) for t in examples),
            tuple(tuple(sorted(d)) for d in dynamic) if dynamic else None,
            tuple(sorted(entries.compile_options().items())),
            config.profile,
        )

    def _compile_static(self, examples, last_try: bool):
        key = self._key(examples, None)
        entry = cache.lookup(key)
        if entry is not None:
            self.name = entry.name
            return entry
        entry, _ = self._compile(key, examples, None, last_try)
        return entry

    def _compile_dynamic(self, last_try: bool):
        key = self._key(self.examples, self.dynamic)
        found = cache.lookup(key)
        if found is None:
            found = self._compile(key, self.examples, self.dynamic, last_try)
            if found[0] is None or not isinstance(found[0], entries.Compiled):
                return None
        entry, (guards, sizes, symbols) = found
        self.guards, self.symbols = guards, symbols
        names = sorted(symbols)
        body = ", ".join(
            "(" + "".join(f"{s if type(s) is int else 'int(' + s + ')'}, " for s in shape) + ")" for shape in sizes
        )
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        self.sizes_of = eval(f"lambda {', '.join(names) or '_'}: ({body},)", dict(SYMPY_INTERP))
        metrics.counter("DynamoDynamicRegion")
        return entry

    def _compile(self, key, examples, dynamic, last_try: bool):
        """(entry, (guards, output sizes, symbols) for a dynamic region), the
        entry cached under ``key``; (None, None) when a dynamic compile fails."""
        t0 = time.perf_counter()
        name = "dynamo-" + hashlib.sha256(repr(key).encode()).hexdigest()[:12]
        self.name = name
        options = entries.compile_options()
        with entries.compile_lock:
            try:
                native = entries.require_native()
                disk = entries.configure_disk_cache(native)
                record = None
                if disk and not config.profile and not config.dump_dir:
                    record = cache.record_key(native, key)
                executable, info = self._load(native, record, options)
                if executable is not None:
                    metrics.counter("DynamoRecordHit")  # no torch-mlir, no MLIR work
                else:
                    lowered = linalg.lower(self.gm, examples, origins=config.profile, dynamic=dynamic)
                    if dynamic is not None:
                        refined = tierup.refined_dynamic_dims(lowered.linalg)
                        if refined or lowered.output_sizes is None:
                            raise LoweringError(f"torch-mlir assumed a ? size static: {refined}")
                        info = (lowered.guards, lowered.output_sizes, lowered.symbols)
                    if config.dump_dir:
                        from .. import debug

                        debug.dump(name, "torch", lowered.torch_mlir)
                        debug.dump(name, "linalg", lowered.linalg)
                    executable = native.compile_linalg(lowered.linalg, profile=config.profile, **options)
                    if dynamic is None:
                        _check_outputs(executable, [o.shape for o in _fake_run(self.gm, examples)])
                    if record is not None:
                        native.disk_cache_write(
                            record, json.dumps({"graph": executable.cache_key, "info": info}).encode()
                        )
                entries.note_compile(executable.compile_stats, disk)
                metrics.sample("KernelCount", executable.kernel_count)
                metrics.counter("UncachedCompile")
                metrics.counter("DynamoRegion")
                entry = entries.Compiled(name, executable, None, self.gm)
                entry.validate = dynamic is not None and not last_try
            except Exception as e:
                if dynamic is not None:
                    metrics.counter("DynamicCompileFallback")
                    if config.verbose:
                        print(f"lazymlir: region {name} compiles static: {str(e)[:500]}")
                    return None, None
                if isinstance(e, LoweringError) and not last_try:
                    culprits = _find_unsupported(self.gm)
                    if culprits:
                        _unsupported.update(culprits)
                        for culprit in culprits:
                            for listener in entries.unsupported_op_listeners:
                                listener(culprit)
                        warnings.warn(
                            "lazymlir: a torch.compile graph holds ops that do not compile; they run eagerly, "
                            "the rest compiles: " + ", ".join(sorted(f"{op} on {list(dt)}" for op, dt in culprits)),
                            RuntimeWarning,
                            stacklevel=2,
                        )
                        raise _Unsupported() from None
                # The caller cuts the region in two and compiles each half.
                entry = _Failed(name, self.gm, "CompileFallback", None)  # the region's runs allocate
                entry.error = f"{type(e).__name__}: {e}"
        cache.insert(key, entry if dynamic is None else (entry, info), time.perf_counter() - t0)
        if config.verbose:
            print(
                f"lazymlir: torch.compile region {name}: {len(self.gm.graph.nodes)} nodes, "
                f"{type(entry).__name__}, {(time.perf_counter() - t0) * 1e3:.1f} ms"
            )
        return entry, info

    @staticmethod
    def _load(native, record, options):
        """The executable (and dynamic info) a record on disk names, or (None, None)."""
        if record is None:
            return None, None
        payload = native.disk_cache_read(record)
        if payload is None:
            return None, None
        try:
            saved = json.loads(payload.decode())
            executable = native.load_cached(str(saved["graph"]), **options)
            info = saved["info"]
        except (ValueError, KeyError, TypeError):
            return None, None
        if info is not None:
            guards, sizes, symbols = info
            info = (guards, sizes, {k: tuple(v) for k, v in symbols.items()})
        return executable, info

    # -- running --

    def _execute(self, entry, inputs, outs) -> None:
        if not getattr(entry, "checked", True):
            inputs = [t.detach() for t in inputs]
        if profiler.active or torch.autograd.profiler._is_profiler_enabled:
            profiler.run(entry, inputs, outs, False)
        else:
            entry.run_into(inputs, outs, False)

    def _run_static(self, *args):
        inputs = [t if t.is_contiguous() else t.contiguous() for t in args]
        outs = [run.output_buffer(shape, dtype) for shape, dtype in self.specs]
        self._execute(self.entry, inputs, outs)
        return outs

    def _run_dynamic(self, *args):
        inputs = [t if t.is_contiguous() else t.contiguous() for t in args]
        sizes = tuple(tuple(t.shape) for t in inputs)
        if sizes != self._last_sizes:
            if any(0 in s for s in sizes) or not self._guards_hold(inputs):
                return self._run_instance(sizes, inputs)
            self._last_sizes = sizes
        values = [inputs[i].shape[d] for i, d in (self.symbols[s] for s in sorted(self.symbols))]
        shapes = self.sizes_of(*values) if values else self.sizes_of(0)
        outs = [run.output_buffer(shape, dtype) for shape, dtype in zip(shapes, self.out_dtypes)]
        self._execute(self.entry, inputs, outs)
        return outs

    def _guards_hold(self, inputs) -> bool:
        if self.guards is None:
            return True
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        if type(self.guards) is str:  # compiled once: parsing it took most of a decode step
            self.guards = compile(self.guards, "<lazymlir guards>", "eval")
        try:
            return bool(eval(self.guards, SYMPY_INTERP, {"L": {f"t{i}": a for i, a in enumerate(inputs)}}))
        except Exception:
            return False

    def _run_instance(self, sizes, inputs):
        """Sizes the dynamic region does not serve (its guards reject them, or
        a zero size): a static region for them, or eager for a zero size."""
        if any(0 in s for s in sizes):
            with torch.no_grad():
                return list(self.gm(*inputs))
        found = self.instances.get(sizes)
        if found is None:
            if len(self.instances) >= 64:
                self.instances.clear()
            examples = [torch.empty(s, dtype=t.dtype) for s, t in zip(sizes, inputs)]
            found = self.instances[sizes] = (
                self._compile_static(examples, True),
                [tuple(v.shape) for v in _fake_run(self.gm, inputs)],
            )
        entry, shapes = found
        outs = [run.output_buffer(shape, dtype) for shape, dtype in zip(shapes, self.out_dtypes)]
        self._execute(entry, inputs, outs)
        return outs
