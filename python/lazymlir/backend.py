"""``torch.compile(model, backend="lazymlir")``: the lazy device's compiler
behind PyTorch's standard entry point.

Dynamo hands :func:`lazymlir` an FX graph of torch calls; AOTAutograd turns it
into functional aten graphs (the forward and, when training, the backward),
each given to :func:`compile_graph`. There the graph is cut into regions
(torch.fx's capability partitioner):

- the ops that compile (every op, but those below) form regions, each lowered
  like a lazy trace (lowering.lower: torch-mlir's decompositions and import,
  the native pipeline) into one executable, cached in the same memory cache
  (lazymlir.cache, under a key of the region's code and input types) and on
  disk (the native compiler's graph cache, and a record per region that skips
  torch-mlir in a second process);
- what runs eagerly between them, as the FX graph's own Python code: ops that
  do not lower (found by lowering each distinct op alone, the first time a
  region fails; remembered for the process, with a warning), random ops (the
  CPU generator keeps eager's random stream), dtypes the compiler lacks,
  zero-size values, and views that the graph returns (computed on the real
  tensors they view, so AOTAutograd gets outputs that really alias their
  bases).

Dynamo's symbolic sizes stay symbols: a region whose inputs have symbolic
sizes compiles once with those dimensions ``?`` (its runs compute their
output sizes and check the guards the lowering recorded; sizes the guards
reject get a static region of their own). Graph inputs that are sizes
(``s0``) become ``aten.sym_size`` of a tensor input that has that size.

Metrics: ``DynamoGraph`` (graphs Dynamo handed over), ``DynamoRegion``
(regions compiled or loaded), ``DynamoEagerOp`` (ops left to run eagerly),
``DynamoDynamicRegion``, ``DynamoRecordHit`` (a region loaded from the disk cache
without lowering it); a region's compile counts ``UncachedCompile`` like a
lazy graph's, and its runs show in lazymlir.profile().
"""

import atexit
import hashlib
import json
import operator
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Set

import torch
import torch.fx

from . import cache, compilation, config, lowering, metrics, profiler, runtime, trace
from . import dtypes as dtype_table

__all__ = ["lazymlir", "compile_graph"]


_reset_at_exit = False
# Every region made, to drop their executables at exit (tensors alive at
# exit keep AOTAutograd's compiled functions, and those the regions).
_regions: "weakref.WeakSet" = weakref.WeakSet()


def _release() -> None:
    try:
        torch._dynamo.reset()
    except Exception:  # at exit: whatever Dynamo holds goes with the process
        pass
    for region in list(_regions):
        region.entry = None
        region.instances.clear()
    for key in [k for k in cache._entries if k and k[0] == "dynamo"]:
        del cache._entries[key]


def lazymlir(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend: ``torch.compile(model, backend="lazymlir")`` (found
    through the ``torch_dynamo_backends`` entry point once lazymlir is
    installed)."""
    from torch._dynamo.backends.common import aot_autograd

    global _reset_at_exit
    if not _reset_at_exit:
        # Dynamo's code caches would hold the executables past the native
        # module's teardown (which reports them as leaked).
        atexit.register(_release)
        _reset_at_exit = True
    metrics.counter("DynamoGraph")
    # Input mutations stay outside the graphs (AOTAutograd's wrapper copies
    # them back): the compiled graphs are pure functions of their inputs.
    # Attention traced as its math (matmuls and a softmax, as the lazy device
    # records it), not as the CPU flash kernel: torch-mlir decomposes that
    # kernel's second output (the log-sum-exp its backward takes) into the
    # attention weights.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph, keep_inference_input_mutations=False)(
            gm, example_inputs
        )


def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> Callable:
    """A functional aten graph (AOTAutograd's forward, backward or inference
    graph) compiled into a boxed callable (a list of arguments in, the
    graph's outputs out)."""
    from torch._functorch.aot_autograd import make_boxed_func

    # The lowering traces the regions again with its own fake tensors and
    # symbols: outside Dynamo's tracing context, whose fake mode and shape
    # environment it would otherwise pick up.
    with torch._guards.tracing(None):
        return make_boxed_func(_compile(gm).forward)


def _compile(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    top = None
    for _ in range(3):  # each failed region names ops to run eagerly, then the graph is cut again
        try:
            top = _build(gm)
            break
        except _Unsupported:
            continue
    if top is None:
        top = _build(gm, last_try=True)
    return top


# (op overload, input dtypes) found not to lower on their own, for this
# process (the lazy device learns them too: compilation.unsupported_op_listeners).
_unsupported: Set[tuple] = set()


class _Unsupported(Exception):
    """A region failed to lower and ops were found that do not: cut again."""


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is_sym(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _is_view(node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _is_view(node.args[0])
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _op_key(node) -> tuple:
    """The key of lowering.unsupported_key: the op and its tensor inputs' dtypes."""
    return (node.target, tuple(_val(a).dtype for a in node.all_input_nodes if isinstance(_val(a), torch.Tensor)))


def _compiles(node) -> bool:
    """Whether a tensor op can go in a compiled region."""
    if node.meta.get("lazymlir_eager"):
        return False
    target = node.target
    if target is operator.getitem:
        return _compiles(node.args[0])
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if lowering.draws_random(target._schema.name):
        return False
    if _op_key(node) in _unsupported:
        return False
    values = [_val(node)] + [_val(a) for a in node.all_input_nodes]
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, torch.Tensor):
            if v.dtype not in dtype_table.SUPPORTED:
                return False
            # numel of a symbolic size is a SymInt: only a static zero is known
            if isinstance(v.numel(), int) and v.numel() == 0:
                return False
        elif v is not None and not _is_sym(v):
            return False
    return True


def _copier(graph: torch.fx.Graph, where: torch.fx.Node, wanted: Callable, **meta) -> Callable:
    """A function mapping a node to its copy, inserted before ``where``, when
    ``wanted(node)``, with the wanted nodes it takes copied too (once each;
    ``meta`` added to the copies' meta); other values map to themselves."""
    copies = {}

    def copy(a):
        if not isinstance(a, torch.fx.Node) or not wanted(a):
            return a
        if a not in copies:
            args = torch.fx.node.map_arg((a.args, a.kwargs), copy)
            with graph.inserting_before(where):
                c = graph.call_function(a.target, *args)
            c.meta.update(a.meta)
            c.meta.update(meta)
            copies[a] = c
        return copies[a]

    return copy


def _private_sizes(graph: torch.fx.Graph) -> None:
    """Each op gets its own copy of the size computations it takes (``sym_size``
    and arithmetic on it): a region computes its sizes itself from its tensor
    inputs, so no size ever crosses from one region to another."""
    for node in list(graph.nodes):
        if node.op != "call_function" or _is_sym(_val(node)):
            continue
        copy = _copier(graph, node, lambda a: a.op == "call_function" and _is_sym(_val(a)))
        node.args, node.kwargs = torch.fx.node.map_arg((node.args, node.kwargs), copy)
    graph.eliminate_dead_code()


def _views_as_reshapes(graph: torch.fx.Graph) -> None:
    """``view`` inside a region means ``reshape`` (as in trace.to_fx): a view's
    validity depends on the strides AOTAutograd traced with, which the
    region's contiguous inputs and the lowering's decompositions do not
    keep; the values are the same. Views the graph returns stay views."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.meta.get("lazymlir_eager"):
            continue
        if node.target in trace.AS_RESHAPE:
            node.target = torch.ops.aten.reshape.default
        elif node.target in _IDENTITIES:  # torch-mlir does not lower alias
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


_IDENTITIES = (torch.ops.aten.alias.default, torch.ops.aten.detach.default)


def _support(graph: torch.fx.Graph) -> Set[torch.fx.Node]:
    """The nodes that go in compiled regions: tensor ops that compile, and
    the size computations they take (after _private_sizes, each has one
    user). An op that takes a size no tensor input has (a graph input that
    is a size, or a value read from a tensor) runs eagerly."""
    free = {}

    def uses_free_size(a) -> bool:
        if a not in free:
            if a.op == "placeholder":
                free[a] = not isinstance(_val(a), torch.Tensor)
            elif a.op == "call_function" and _is_sym(_val(a)):
                free[a] = any(uses_free_size(i) for i in a.all_input_nodes)
            else:
                free[a] = False
        return free[a]

    inside = set()
    for node in graph.nodes:
        if (
            node.op == "call_function"
            and not _is_sym(_val(node))
            and _compiles(node)
            and not any(uses_free_size(a) for a in node.all_input_nodes)
        ):
            inside.add(node)
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and _is_sym(_val(node)) and node.users and all(u in inside for u in node.users):
            inside.add(node)
    return inside


def _sizes_from_tensors(graph: torch.fx.Graph) -> None:
    """Graph inputs that are sizes (Dynamo's ``s0``) replaced, in their uses,
    by ``aten.sym_size`` of a tensor input with that size: a region's inputs
    are then tensors only, and the size a ``?`` dimension of one."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    dims = {}
    for p in placeholders:
        v = _val(p)
        if isinstance(v, torch.Tensor):
            for d, size in enumerate(v.shape):
                if isinstance(size, torch.SymInt):
                    dims.setdefault(size.node.expr, (p, d))
    last = placeholders[-1] if placeholders else None
    for p in placeholders:
        v = _val(p)
        if isinstance(v, torch.SymInt) and p.users and v.node.expr in dims:
            tensor, d = dims[v.node.expr]
            with graph.inserting_after(last):
                size = graph.call_function(torch.ops.aten.sym_size.int, (tensor, d))
            size.meta["val"] = v
            p.replace_all_uses_with(size)
            last = size


def _returned_views_eager(graph: torch.fx.Graph) -> None:
    """Views among the graph's outputs computed eagerly, on the tensors they
    view: a compiled region would return a copy, and AOTAutograd rebuilds an
    output that aliases an input or another output from the strides of what
    it gets."""
    output = next(n for n in reversed(list(graph.nodes)) if n.op == "output")
    eager = _copier(graph, output, _is_view, lazymlir_eager=True)
    output.args = torch.fx.node.map_arg(output.args, eager)
    graph.eliminate_dead_code()


def _check_outputs(executable, shapes) -> None:
    """Raises LoweringError unless the executable's outputs have these shapes
    (a decomposition that computes something else, such as the attention
    weights for a log-sum-exp, would be written out of bounds)."""
    for i, ((_, got), want) in enumerate(zip(executable.outputs, shapes)):
        if len(got) != len(want) or any(g not in (-1, w) for g, w in zip(got, want)):
            raise lowering.LoweringError(f"output {i} lowered with shape {list(got)}, not {list(want)}")


def _concrete(value):
    """A size at its hint (the value it had when Dynamo traced)."""
    return value.node.hint if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) else value


def _find_unsupported(gm: torch.fx.GraphModule) -> Set[tuple]:
    """The :func:`_op_key` of the ops of ``gm`` that do not lower alone, or
    lower with outputs of other shapes (lowering.distinct_failures: each
    distinct one tried once, on inputs of its shapes and dtypes)."""
    native = compilation.native_compiler()

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
            executable = native.compile_linalg(lowering.lower(probe, examples).linalg, tiered=True)
            _check_outputs(executable, [o.shape for o in _fake_run(probe, examples)])
        except (lowering.LoweringError, native.CompileError):
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

    return lowering.distinct_failures(gm.graph.nodes, key, fails)


def _build(gm: torch.fx.GraphModule, last_try: bool = False) -> torch.fx.GraphModule:
    """The graph with its regions compiled: a GraphModule whose code calls
    each region's executable and runs the rest eagerly."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import create_op_support

    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    _sizes_from_tensors(graph)
    _returned_views_eager(graph)
    _private_sizes(graph)
    _views_as_reshapes(graph)
    top = torch.fx.GraphModule(gm, graph)
    inside = _support(graph)
    partitioner = CapabilityBasedPartitioner(
        top, create_op_support(lambda _, n: n in inside), allows_single_node_partition=True
    )
    partitions = [
        p
        for p in partitioner.propose_partitions()
        if any(not _is_sym(_val(n)) and n.target is not operator.getitem for n in p.nodes)
    ]
    eager_ops = sum(
        1
        for n in graph.nodes
        if n.op == "call_function"
        and not _is_sym(_val(n))
        and not _is_view(n)
        and n.target is not operator.getitem
        and n not in inside
    )
    if eager_ops:
        metrics.counter("DynamoEagerOp", eager_ops)
    top = _fused(top, [p.nodes for p in partitions], last_try)
    metrics.counter("DynamoCompiledGraph")
    return top


def _fused(top: torch.fx.GraphModule, partitions, last_try: bool) -> torch.fx.GraphModule:
    """``top`` with each partition (a dict of its nodes) replaced by the call
    of its region, compiled (:func:`_compile_region`)."""
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

    top = fuse_by_partitions(top, partitions, prefix="lazymlir_region_", always_return_tuple=True)
    for node in list(top.graph.nodes):
        if node.op == "call_module":
            node.op, node.target = "call_function", _compile_region(getattr(top, node.target), last_try)
    for name in [n for n, _ in top.named_children() if n.startswith("lazymlir_region_")]:
        delattr(top, name)
    top.recompile()
    return top


def _compute_ops(gm: torch.fx.GraphModule) -> List[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and not _is_sym(_val(n)) and n.target is not operator.getitem
    ]


def _compile_region(gm: torch.fx.GraphModule, last_try: bool) -> Callable:
    """A region's run: compiled whole, or, when that fails and no op alone is
    to blame (torch-mlir fails on a combination of ops), as two halves each
    compiled the same way; a single op that fails runs eagerly, with a
    warning and the counter CompileFallback."""
    inputs = [_val(n) for n in gm.graph.nodes if n.op == "placeholder"]
    region = _Region(gm, inputs, last_try)
    error = getattr(region.entry, "error", None)
    if error is None:
        return region.run
    ops = _compute_ops(gm)
    if len(ops) >= 2:
        if config.verbose:
            print(
                f"lazymlir: torch.compile region {region.name} ({len(ops)} ops) compiles in two halves: {error[:300]}"
            )
        return _halves(gm, last_try)
    warnings.warn(
        f"lazymlir: {ops[0].target if ops else 'a region'} in a torch.compile graph failed to compile "
        f"and runs eagerly: {error[:2000]}",
        RuntimeWarning,
        stacklevel=2,
    )
    metrics.counter("CompileFallback")
    return region.run


def _halves(gm: torch.fx.GraphModule, last_try: bool) -> Callable:
    """``gm`` run as two regions: its ops in graph order cut in the middle (a
    prefix of a topological order takes every path between its nodes);
    element reads and sizes go with the op they belong to."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    top = torch.fx.GraphModule(gm, graph)
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    compute = _compute_ops(top)
    first = set(compute[: len(compute) // 2])
    side = {}
    for n in nodes:
        if n.target is operator.getitem and not _is_sym(_val(n)):
            side[n] = side.get(n.args[0], n.args[0] in first)
        elif not _is_sym(_val(n)):
            side[n] = n in first
    for n in reversed(nodes):
        if _is_sym(_val(n)):
            side[n] = any(side.get(u, False) for u in n.users)
    parts = [dict.fromkeys(n for n in nodes if side[n] == half) for half in (True, False)]
    forward = _fused(top, [p for p in parts if p], last_try).forward

    def halves(*args):
        return forward(*args)

    return halves


def _example(value) -> torch.Tensor:
    """A tensor with ``value``'s dtype and sizes (a symbolic size at its
    hint), for the lowering, which only looks at its metadata."""
    sizes = [s.node.hint if isinstance(s, torch.SymInt) else int(s) for s in value.shape]
    return torch.empty(sizes, dtype=value.dtype)


class _Failed(compilation._Eager):
    """A region that failed to compile (cached, so that it is cut in halves
    again without another try): its FX graph, run eagerly."""

    __slots__ = ("error",)


def _fake_run(gm: torch.fx.GraphModule, inputs):
    """``gm``'s outputs computed on fake tensors like ``inputs`` (their shapes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        return list(gm(*[mode.from_tensor(t) for t in inputs]))


class _Region:
    """One compiled region: its executable (a compilation._Compiled) and what
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
            tuple(sorted(compilation._options().items())),
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
            if found[0] is None or not isinstance(found[0], compilation._Compiled):
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
        native = compilation.native_compiler()
        name = "dynamo-" + hashlib.sha256(repr(key).encode()).hexdigest()[:12]
        self.name = name
        options = compilation._options()
        with compilation._compile_lock:
            try:
                if native is None:
                    raise RuntimeError(f"the native compiler is not available ({compilation._compiler_import_error})")
                disk = compilation._configure_disk_cache(native)
                record = None
                if disk and not config.profile and not config.dump_dir:
                    record = cache.record_key(native, key)
                executable, info = self._load(native, record, options)
                if executable is not None:
                    metrics.counter("DynamoRecordHit")  # no torch-mlir, no MLIR work
                else:
                    lowered = lowering.lower(self.gm, examples, origins=config.profile, dynamic=dynamic)
                    if dynamic is not None:
                        refined = compilation._refined_dynamic_dims(lowered.linalg)
                        if refined or lowered.output_sizes is None:
                            raise lowering.LoweringError(f"torch-mlir assumed a ? size static: {refined}")
                        info = (lowered.guards, lowered.output_sizes, lowered.symbols)
                    if config.dump_dir:
                        from . import debug

                        debug.dump(name, "torch", lowered.torch_mlir)
                        debug.dump(name, "linalg", lowered.linalg)
                    executable = native.compile_linalg(lowered.linalg, profile=config.profile, **options)
                    if dynamic is None:
                        _check_outputs(executable, [o.shape for o in _fake_run(self.gm, examples)])
                    if record is not None:
                        native.disk_cache_write(
                            record, json.dumps({"graph": executable.cache_key, "info": info}).encode()
                        )
                compilation._note_compile(executable.compile_stats, disk)
                metrics.sample("KernelCount", executable.kernel_count)
                metrics.counter("UncachedCompile")
                metrics.counter("DynamoRegion")
                entry = compilation._Compiled(name, executable, None, self.gm)
                entry.validate = dynamic is not None and not last_try
            except Exception as e:
                if dynamic is not None:
                    metrics.counter("DynamicCompileFallback")
                    if config.verbose:
                        print(f"lazymlir: region {name} compiles static: {str(e)[:500]}")
                    return None, None
                if isinstance(e, lowering.LoweringError) and not last_try:
                    culprits = _find_unsupported(self.gm)
                    if culprits:
                        _unsupported.update(culprits)
                        for culprit in culprits:
                            for listener in compilation.unsupported_op_listeners:
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
        outs = [runtime._empty(shape, dtype) for shape, dtype in self.specs]
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
        outs = [runtime._empty(shape, dtype) for shape, dtype in zip(shapes, self.out_dtypes)]
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
        outs = [runtime._empty(shape, dtype) for shape, dtype in zip(shapes, self.out_dtypes)]
        self._execute(entry, inputs, outs)
        return outs
