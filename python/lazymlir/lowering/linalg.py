"""From an FX graph of aten ops to linalg-on-tensors text, with torch-mlir.

The same route as ``torch_mlir.fx.export_and_import(..., output_type=
"linalg-on-tensors")``, minus torch.export (the trace is already a functional
aten graph): decompose with torch-mlir's table while re-tracing on fake tensors
(which also fills ``node.meta["val"]`` as its FxImporter expects), import into the
torch dialect, run the torch backend pipeline, then lower to linalg.  Only a cache
miss comes here, so the torch-mlir imports are deferred to the first miss.
"""

import contextlib
import operator
import re
import threading
from typing import Any, List, NamedTuple, Optional, Sequence, Set

import torch

from . import LoweringError
from .decompositions import decomposition_table
from .marks import op_config, probe_order
from .opmath import OpMathInterpreter, uses_low_precision


_private_tracing = threading.local()
_patch_lock = threading.Lock()
_patched = False


@contextlib.contextmanager
def private_fx_tracing():
    """FX tracing (make_fx) on this thread without touching torch.fx's
    process-wide "symbolic tracing" flag, for lowerings on lazymlir's
    background threads. Tracer.trace sets that flag and restores what it saw
    on entry: a trace here interleaved with one on another thread (Dynamo's
    AOTAutograd, on the main thread) could leave it set for good, and every
    torch.compile'd function would then run uncompiled (or raise). Inside
    this block Tracer.trace runs as a copy whose flag is its own."""
    global _patched
    with _patch_lock:
        if not _patched:
            import types

            import torch.fx._symbolic_trace as symbolic_trace

            original = symbolic_trace.Tracer.trace
            # The function itself, under the wrappers Dynamo puts around it
            # (torch._dynamo.disable, at the first torch.compile).
            inner = original
            while inner.__globals__ is not symbolic_trace.__dict__ and hasattr(inner, "__wrapped__"):
                inner = inner.__wrapped__
            if inner.__globals__ is not symbolic_trace.__dict__:  # an unknown wrapper: trace as usual
                shadow = original
            else:
                shadow = types.FunctionType(
                    inner.__code__, dict(symbolic_trace.__dict__), inner.__name__, inner.__defaults__, inner.__closure__
                )
                shadow.__kwdefaults__ = inner.__kwdefaults__

            def trace(self, *args, **kwargs):
                if getattr(_private_tracing, "on", False):
                    return shadow(self, *args, **kwargs)
                return original(self, *args, **kwargs)

            trace.__doc__, trace.__wrapped__ = original.__doc__, original
            symbolic_trace.Tracer.trace = trace
            _patched = True
    _private_tracing.on = True
    try:
        yield
    finally:
        _private_tracing.on = False


class Lowered(NamedTuple):
    torch_mlir: str  # torch backend IR (lowers further with torch-mlir-opt)
    # linalg-on-tensors: what the native compiler takes. Outputs that lowered
    # to one SSA value are returned twice; the native pipeline gives each its
    # own copy (lazymlir-distinct-results).
    linalg: str
    # Dynamic graphs (see lower's ``dynamic``): what the decomposition
    # assumed of the symbolic sizes, as an expression over the inputs t0,
    # t1, ... (None: nothing), and the ShapeEnv that evaluates it.
    guards: Any = None
    shape_env: Any = None
    # Dynamic graphs: the size of each output dimension, an int or a Python
    # expression over the symbols in ``symbols`` ({name: (argument,
    # dimension)}), to check each instance's output buffers against.
    output_sizes: Any = None
    symbols: Any = None


# The TMTensor ops the native compiler lowers (lazymlir-lower-tm-tensor).
_NATIVE_TM_TENSOR_OPS = frozenset({"scatter", "scan", "sort", "yield"})


def _symbolic_inputs(example_inputs: List[torch.Tensor], dynamic: Sequence[Set[int]]):
    """Fake tensors of the inputs whose dimensions in ``dynamic[i]`` are
    symbols (the others static), and their ShapeEnv.  No duck sizing: two
    symbolic sizes equal in these inputs are not assumed equal; what the graph
    needs of them becomes a guard."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    env = ShapeEnv(duck_shape=False)
    mode = FakeTensorMode(shape_env=env)
    fakes = []
    for t, dims in zip(example_inputs, dynamic):
        sizes = [DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(t.dim())]
        fakes.append(mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes)))
    return fakes, mode, env


def decompose(
    gm: torch.fx.GraphModule,
    example_inputs: List[torch.Tensor],
    origins: bool = False,
    dynamic: Optional[Sequence[Set[int]]] = None,
):
    """The graph in the ops torch-mlir lowers.  ``origins``: each node of the
    result carries, as its stack trace, the op of ``gm`` it came from, which
    torch-mlir's importer turns into the location ``"op:aten.<op>":<index>:0`` of
    what it emits (the profiler names kernels by them).  ``dynamic``: for each
    input, the dimensions that stay symbolic; then returns (graph, guards,
    shape env), see :class:`Lowered`."""
    from torch.fx.experimental.proxy_tensor import make_fx

    traced, context = gm, contextlib.nullcontext()
    low = uses_low_precision(gm, example_inputs)
    if origins or low:
        import torch.fx.traceback as fx_traceback

        if origins:
            for i, node in enumerate(gm.graph.nodes):
                if node.op == "call_function":
                    node.meta["stack_trace"] = f'  File "op:{_op_name(node.target)}", line {i}, in lazymlir\n'
        # An interpreter sets each node's meta as current (origins) and can
        # run ops in float32 (low precision).
        interpreter = OpMathInterpreter(gm) if low else torch.fx.Interpreter(gm)
        traced, context = (lambda *args: interpreter.run(*args)), fx_traceback.preserve_node_meta()
    if dynamic is None:
        with context:
            return make_fx(traced, decomposition_table=decomposition_table(), tracing_mode="fake")(
                *_distinct(example_inputs)
            )
    fakes, mode, env = _symbolic_inputs(_distinct(example_inputs), dynamic)
    with context, mode, _conv_layouts_unguarded():
        out = make_fx(traced, decomposition_table=decomposition_table(), tracing_mode="symbolic")(*fakes)
    _fold_size_bounds(out, env)
    _collapse_merging_views(out)
    _flatten_index_put_indices(out)
    # Every input dimension is guarded, the static ones too: a symbol the
    # decomposition specialized (pow's exponent 3 became x*x*x, guard s == 3)
    # becomes static in the ShapeEnv, and ignore_static would drop its guard.
    return out, env.produce_guards_expression(fakes, ignore_static=False), env, _output_sizes(out, fakes)


@contextlib.contextmanager
def _conv_layouts_unguarded():
    """Fake convolutions on symbolic sizes without guards on those sizes.
    FakeTensor's convolution asks ATen which backend eager would pick, to give
    its output eager's memory format; the choice compares the batch with 16,
    so a graph traced at batch 4 was guarded to batches 2..15 and every larger
    batch compiled static. The layout is the only thing decided, and the
    lowered graph has value semantics: with any size symbolic the output
    takes the default layout, as FakeTensor does for sizes without hints."""
    from torch._subclasses import fake_impls
    from torch.fx.experimental import symbolic_shapes

    aten, table = torch.ops.aten, fake_impls.op_implementations_dict
    convolutions = (
        aten.convolution.default,
        aten._convolution.default,
        aten._convolution.deprecated,
        aten.convolution_backward.default,
    )
    originals = {op: table[op] for op in convolutions if op in table}

    def unguarded(impl):
        def run(*args, **kwargs):
            hinted = symbolic_shapes.has_guarding_hint
            symbolic_shapes.has_guarding_hint = lambda s: not isinstance(s, torch.SymInt) and hinted(s)
            try:
                return impl(*args, **kwargs)
            finally:
                symbolic_shapes.has_guarding_hint = hinted

        return run

    table.update({op: unguarded(impl) for op, impl in originals.items()})
    try:
        yield
    finally:
        table.update(originals)


def _output_sizes(gm: torch.fx.GraphModule, fakes):
    """(sizes of each output as ints or expression strings, {symbol name:
    (argument, dimension)}) of a symbolically traced graph; None when an
    output size uses a symbol that is not an input's size."""
    import sympy

    symbols = {}
    for i, f in enumerate(fakes):
        for d, size in enumerate(f.shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                symbols.setdefault(str(size.node.expr), (i, d))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    sizes = []
    for value in output.args[0]:
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        dims = []
        for size in val.shape:
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if not {str(x) for x in expr.free_symbols} <= set(symbols):
                    return None
                dims.append(str(expr))
            else:
                dims.append(int(size))
        sizes.append(dims)
    return sizes, symbols


def _fold_size_bounds(gm: torch.fx.GraphModule, env) -> None:
    """``sym_max(s, 1)`` and ``sym_min(s, c)`` on a symbolic size whose range
    decides them (a symbol is at least 2) become ``s`` (or ``c``): contiguous
    strides are computed with them, and torch-mlir's importer does not take
    them."""
    import torch.fx.experimental.sym_node  # noqa: F401  (torch.sym_max)

    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (torch.sym_max, torch.sym_min) or len(node.args) != 2:
            continue
        bounds = []
        for a in node.args:
            if isinstance(a, int):
                bounds.append((a, a))
            elif isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.SymInt):
                r = env.bound_sympy(a.meta["val"].node.expr)
                bounds.append((r.lower, r.upper))
            else:
                bounds = None
                break
        if bounds is None:
            continue
        (lo0, hi0), (lo1, hi1) = bounds
        keep = None
        if node.target is torch.sym_max:
            keep = 0 if lo0 >= hi1 else 1 if lo1 >= hi0 else None
        else:
            keep = 0 if hi0 <= lo1 else 1 if hi1 <= lo0 else None
        if keep is not None:
            node.replace_all_uses_with(node.args[keep])
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _collapse_merging_views(gm: torch.fx.GraphModule) -> None:
    """A view (reshape) that only merges runs of adjacent dimensions, one of
    them symbolic (``[B, T, C] -> [B * T, C]``, a 3-D linear's input),
    becomes ``prims.collapse`` per run. torch-mlir lowers a view merging two
    ``?`` dimensions with a ``tensor.cast`` of one of them to 1 (an unchecked
    assumption, wrong for every other size); collapse lowers to
    ``tensor.collapse_shape``, right for every size."""
    aten = torch.ops.aten
    reshapes = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in reshapes or not isinstance(node.args[0], torch.fx.Node):
            continue
        source = node.args[0]
        val, out = source.meta.get("val"), node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):
            continue
        ins, outs = [_size_expr(s) for s in val.shape], [_size_expr(s) for s in out.shape]
        runs, i = [], 0
        for size in outs:  # the input dimensions each output dimension is the product of
            if i == len(ins):
                runs = None
                break
            start, product = i, ins[i]
            i += 1
            while not _equal(product, size) and i < len(ins):
                product *= ins[i]
                i += 1
            if not _equal(product, size):
                runs = None
                break
            runs.append((start, i - 1))
        if not runs or i != len(ins):
            continue
        runs = [(a, b) for a, b in runs if b > a and any(not ins[d].is_number for d in range(a, b + 1))]
        if not runs:
            continue
        current, current_val = source, val
        with gm.graph.inserting_before(node), val.fake_mode:
            for a, b in reversed(runs):  # the last run first: the earlier ones keep their indices
                current_val = torch.ops.prims.collapse.default(current_val, a, b)
                current = gm.graph.call_function(torch.ops.prims.collapse.default, (current, a, b))
                _copy_origin(node, current)
                current.meta["val"] = current_val
        node.replace_all_uses_with(current)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _flatten_index_put_indices(gm: torch.fx.GraphModule) -> None:
    """``index_put(x, [I], V)`` with one index tensor of several dimensions,
    one of them symbolic (embedding's backward: I is [B, T], V [B, T, C]),
    becomes the same on ``I`` and ``V`` with those dimensions collapsed into
    one and a dimension of 1 after it (I [B * T, 1], V [B * T, 1, C]).
    torch-mlir lowers the first with V's second dimension assumed 1 (wrong
    unless T is 1), the second right; a 1-D index it does not lower."""
    aten = torch.ops.aten
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (aten.index_put.default, aten._unsafe_index_put.default):
            continue
        self_, indices, values = node.args[:3]
        if not (
            isinstance(indices, (list, tuple))
            and len(indices) == 1
            and isinstance(indices[0], torch.fx.Node)
            and isinstance(values, torch.fx.Node)
            and isinstance(self_, torch.fx.Node)
        ):
            continue
        index, x, v = indices[0].meta.get("val"), self_.meta.get("val"), values.meta.get("val")
        if not all(isinstance(t, torch.Tensor) for t in (index, x, v)) or index.dim() < 2 or index.dtype == torch.bool:
            continue
        if not any(isinstance(s, torch.SymInt) for s in index.shape):
            continue
        k = index.dim()
        # Values exactly index's shape then x's trailing ones (no broadcast).
        if v.dim() != k + x.dim() - 1 or any(
            not _equal(_size_expr(a), _size_expr(b)) for a, b in zip(v.shape, tuple(index.shape) + tuple(x.shape[1:]))
        ):
            continue

        def call(target, *args):
            n = gm.graph.call_function(target, args)
            _copy_origin(node, n)
            n.meta["val"] = target(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args])
            return n

        with gm.graph.inserting_before(node), index.fake_mode:
            flat_i = call(aten.unsqueeze.default, call(torch.ops.prims.collapse.default, indices[0], 0, k - 1), 1)
            flat_v = call(aten.unsqueeze.default, call(torch.ops.prims.collapse.default, values, 0, k - 1), 1)
        node.args = (self_, [flat_i], flat_v) + tuple(node.args[3:])
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()


def _copy_origin(node: torch.fx.Node, new: torch.fx.Node) -> None:
    """``new`` replaces part of ``node``: the same origin (the importer's
    location), none of its type metadata."""
    if "stack_trace" in node.meta:
        new.meta["stack_trace"] = node.meta["stack_trace"]


def _size_expr(size):
    """A size of a symbolically traced tensor as a sympy expression."""
    import sympy

    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _equal(a, b) -> bool:
    """Two size expressions equal for every value of their symbols."""
    import sympy

    return sympy.expand(a - b) == 0


def _op_name(target) -> str:
    """aten.mm.default -> aten.mm; aten.add.Tensor stays."""
    name = str(target)
    return name[: -len(".default")] if name.endswith(".default") else name


def _distinct(example_inputs: List[torch.Tensor]) -> List[torch.Tensor]:
    """The inputs with every repeated object (two lifted scalars of one value
    share a cached 0-dim tensor; one leaf can feed two placeholders) replaced by
    a copy.  Fake tensors are memoized by the real tensor's identity, so
    repeated objects would become one placeholder in the traced graph: the
    compiled graph would then read one argument for both, and a later call
    with different values would get a silently wrong result."""
    seen = set()
    out = []
    for t in example_inputs:
        if id(t) in seen:
            t = t.clone()
        seen.add(id(t))
        out.append(t)
    return out


def lower(
    gm: torch.fx.GraphModule,
    example_inputs: List[torch.Tensor],
    origins: bool = False,
    dynamic: Optional[Sequence[Set[int]]] = None,
) -> Lowered:
    """Raises LoweringError (with torch-mlir's diagnostics) on any failure.
    ``origins``: the linalg text keeps locations naming the op of ``gm`` each
    op came from (see :func:`decompose`).  ``dynamic``: for each input, the
    dimensions that stay symbolic (``?`` in the IR)."""
    guards = shape_env = output_sizes = None
    try:
        from torch_mlir import fx as tm_fx
        from torch_mlir import ir as tm_ir
        from torch_mlir.compiler_utils import OutputType, lower_mlir_module
        from torch_mlir.dialects import torch as tm_torch
        from torch_mlir.extras.fx_importer import FxImporter

        decomposed = decompose(gm, example_inputs, origins, dynamic)
        if dynamic is not None:
            decomposed, guards, shape_env, output_sizes = decomposed
        _refuse_frontend_failures(decomposed)
        # MLIR's diagnostics go into the LoweringError instead of the user's
        # stderr (a failure is not the user's error: the op runs eagerly).
        context = tm_ir.Context()
        tm_torch.register_dialect(context)
        diagnostics = []
        handler = context.attach_diagnostic_handler(lambda d: diagnostics.append(str(d)) or True)
        try:
            importer = FxImporter(context=context)
            module = tm_fx.stateless_fx_import(
                decomposed, output_type=OutputType.TORCH, fx_importer=importer, model_name="main"
            )
            torch_text = str(module)
            lower_mlir_module(False, OutputType.LINALG_ON_TENSORS, module)
        except Exception as e:
            raise LoweringError(f"{type(e).__name__}: {e}" + "".join("\n" + d for d in diagnostics)) from e
        finally:
            handler.detach()
        linalg = module.operation.get_asm(enable_debug_info=origins)
        if "tm_tensor." in linalg:
            unsupported = set(re.findall(r"tm_tensor\.(\w+)", linalg)) - _NATIVE_TM_TENSOR_OPS
            if unsupported:
                # A LoweringError (not a native compile error): the runtime then
                # finds the op and runs only it eagerly from then on.
                raise LoweringError(
                    "the lowering uses torch-mlir's TMTensor op(s) "
                    + ", ".join(sorted("tm_tensor." + n for n in unsupported))
                    + ", which the native compiler does not take"
                )
            # torch-mlir's own dialect for scatter/scan/sort, which MLIR 22 does
            # not know: in the generic op form the native compiler parses these
            # ops as unregistered ones, and its first pass
            # (lazymlir-lower-tm-tensor) rewrites them into loops.  Other
            # modules stay in the pretty form, for the dumps' readers.
            linalg = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=origins)
    except LoweringError:
        raise
    except Exception as e:  # torch-mlir raises many kinds; all mean "cannot compile"
        raise LoweringError(f"{type(e).__name__}: {e}") from e
    if output_sizes is None:
        return Lowered(torch_text, linalg, guards, shape_env)
    return Lowered(torch_text, linalg, guards, shape_env, output_sizes[0], output_sizes[1])


def _integer_input(node) -> bool:
    val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and not val.is_floating_point()


def _always(node) -> bool:
    return True


# Ops whose torch-mlir lowering crashes the process (it runs in ours) or
# gives wrong values: each predicate takes an FX node of the decomposed
# graph.  Refused with a LoweringError, the op runs eagerly instead.
_REFUSED = {
    # ConvertAtenMaxPoolOp asks an integer element type for its float
    # semantics (getFloatInf): SIGSEGV.
    torch.ops.aten.max_pool3d.default: _integer_input,
    torch.ops.aten.max_pool3d_with_indices.default: _integer_input,
    # The same crash through torch-mlir's own decomposition of it.
    torch.ops.aten.adaptive_max_pool3d.default: _integer_input,
    # log(cumsum(exp(x))): inf where exp overflows (eager is stable).
    torch.ops.aten.logcumsumexp.default: _always,
}


def _refuse_frontend_failures(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        refused = _REFUSED.get(node.target)
        if refused is not None and refused(node):
            raise LoweringError(f"{node.target} on these inputs: torch-mlir's lowering crashes or is wrong")


def unsupported_key(n) -> tuple:
    """What the probe marks: the node's op and its :func:`op_config` (an op
    may lower for float32 and not for int64, with align_corners=False and not
    with True)."""
    return (n.op, op_config(n.inputs, n.sig[1:]))


def draws_random(name: str) -> bool:
    """Whether the op named ``name`` (its schema name) draws random numbers:
    it runs eagerly, on the CPU generator, so that programs keep eager's
    random stream (both front ends keep it out of compiled graphs)."""
    return any(r in name for r in _RNG_NAMES) and "backward" not in name


_RNG_NAMES = (
    "rand",
    "normal",
    "bernoulli",
    "uniform",
    "dropout",
    "multinomial",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "random",
    "poisson",
)


def distinct_failures(items, key, fails, limit: int = 64) -> Set:
    """The keys of the ``items`` for which ``fails(item)``, each distinct key
    (``key(item)``; None: not tried) tried once, ``limit`` of them at most.
    Empty when every one of several fails, which means the pipeline, not an
    op, is broken."""
    bad = set()
    tried = set()
    for item in items:
        k = key(item)
        if k is None or k in tried or len(tried) >= limit:
            continue
        tried.add(k)
        if fails(item):
            bad.add(k)
    if len(tried) > 1 and bad == tried:  # nothing lowers: the pipeline is at fault, not an op
        return set()
    return bad


# How many distinct configurations find_unsupported tries at most.
PROBE_LIMIT = 64


def find_unsupported(graph, limit: int = None) -> Set:
    """The :func:`unsupported_key` of the ops of ``graph`` that do not lower
    on their own: each distinct one is tried once, alone, on zero inputs of
    the same shapes and dtypes (:func:`distinct_failures`), each op's first
    configuration first (marks.probe_order)."""
    from ..trace.ir import Graph, Node, map_nodes, to_fx

    def fails(n) -> bool:
        leaves = {}
        for i in n.inputs:
            if i not in leaves:
                leaves[i] = Node.leaf(torch.zeros(i.meta.shape, dtype=i.meta.dtype))

        alone = Node(
            n.op,
            map_nodes(n.args, leaves.__getitem__),
            {k: map_nodes(v, leaves.__getitem__) for k, v in n.kwargs.items()},
            tuple(leaves[i] for i in n.inputs),
            n.sig,
            n.meta,
        )
        outputs = [alone]
        if not isinstance(n.meta, torch.Tensor):  # multi-output: return its first tensor
            # (not its first output: convolution_backward's output_mask
            # [False, True, False] makes the first None, and a graph
            # returning None does not lower, whatever the op)
            i = next((i for i, m in enumerate(n.meta) if isinstance(m, torch.Tensor)), 0)
            outputs = [Node(operator.getitem, (alone, i), {}, (alone,), (operator.getitem, i), n.meta[i])]
        nodes = [alone] + [o for o in outputs if o is not alone]
        single = Graph(None, list(leaves.values()), nodes, outputs)
        try:
            lower(to_fx(single), [leaf.data for leaf in single.inputs])
        except LoweringError:
            return True
        return False

    def key(n):
        return unsupported_key(n) if isinstance(n.op, torch._ops.OpOverload) else None

    return distinct_failures(probe_order(graph.nodes, key), key, fails, PROBE_LIMIT if limit is None else limit)
