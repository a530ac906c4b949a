"""``torch.compile(model, backend="lazymlir")``: the lazy device's compiler
behind PyTorch's standard entry point.

Dynamo hands :func:`lazymlir` an FX graph of torch calls; AOTAutograd turns it
into functional aten graphs (the forward and, when training, the backward),
each given to :func:`compile_graph`. There the graph is cut into regions
(torch.fx's capability partitioner):

- the ops that compile (every op, but those below) form regions, each lowered
  like a lazy trace (linalg.lower: torch-mlir's decompositions and import,
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
import operator
import warnings
from typing import Callable, List, Set

import torch
import torch.fx

from .. import config, metrics
from .. import dtypes as dtype_table
from ..execution import cache
from ..lowering import linalg
from ..trace import ir
from .regions import _Region, _regions, _op_key, _Unsupported, _unsupported, _val

__all__ = ["lazymlir", "compile_graph"]


_reset_at_exit = False


def _release() -> None:
    try:
        torch._dynamo.reset()
    except Exception:  # at exit: whatever Dynamo holds goes with the process
        pass
    for region in list(_regions):
        region.entry = None
        region.instances.clear()
    cache.drop("dynamo")


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


def _is_sym(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _is_view(node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _is_view(node.args[0])
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _compiles(node) -> bool:
    """Whether a tensor op can go in a compiled region."""
    if node.meta.get("lazymlir_eager"):
        return False
    target = node.target
    if target is operator.getitem:
        return _compiles(node.args[0])
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if linalg.draws_random(target._schema.name):
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
    """``view`` inside a region means ``reshape`` (as in ir.to_fx): a view's
    validity depends on the strides AOTAutograd traced with, which the
    region's contiguous inputs and the lowering's decompositions do not
    keep; the values are the same. Views the graph returns stay views."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.meta.get("lazymlir_eager"):
            continue
        if node.target in ir.AS_RESHAPE:
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
