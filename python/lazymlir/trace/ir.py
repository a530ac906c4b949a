"""The functional trace: IR nodes, graph collection and the cache key.

A :class:`Node` is one aten op applied to other nodes and constants, or, once it
has been computed (or came from the user), a leaf holding device data: a CPU
tensor that nothing ever writes to, dense, in its own memory format (contiguous,
or e.g. channels_last: a permutation of a contiguous buffer, see
:func:`dense_perm`).  Nodes only point backwards,
so the graph a barrier needs is what is reachable from the tensors it reads, and
dead intermediate nodes are freed by reference counting.  Aliasing and
mutation never reach this level: the device (``frontend/tensor.py``, ``frontend/handlers.py``) rewrites them functionally.
"""

import hashlib
import math
import operator
from typing import List, NamedTuple, Sequence

import torch

from .. import _device

aten = torch.ops.aten


_leaf_metas = {}

# Quantized dtypes have no meta tensors: their metas are of the integer
# representation.  Nothing with them is ever compiled (every op on them runs
# eagerly on the device data, which is the quantized CPU tensor).
QUANTIZED_REPR = {
    torch.quint8: torch.uint8,
    torch.qint8: torch.int8,
    torch.qint32: torch.int32,
    torch.quint4x2: torch.uint8,
    torch.quint2x4: torch.uint8,
}


def dense_perm(shape, stride):
    """For a non-contiguous but dense layout (channels_last, a transpose), the
    permutation ``p`` of the dimensions such that ``t.permute(p)`` is
    contiguous: the order of the dimensions in memory, outermost first.  None
    when there is none (the layout has gaps or overlaps)."""
    n = len(shape)
    perm = sorted(range(n), key=lambda i: -stride[i])  # stable: ties keep index order
    expected = 1
    for i in reversed(perm):
        size = shape[i]
        if size != 1 and stride[i] != expected:
            return None
        expected *= size
    return tuple(perm)


def device_data(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as device data: a dense tensor keeps its layout
    (channels_last storage stays NHWC), anything else is made contiguous.
    Only strided tensors can be device data."""
    if tensor.layout != torch.strided:
        raise NotImplementedError(
            f"lazymlir: {tensor.layout} tensors cannot live on the lazy device; "
            "keep them on the CPU (or convert with .to_dense())"
        )
    if tensor.is_contiguous() or dense_perm(tensor.shape, tensor.stride()) is not None:
        return tensor
    return tensor.contiguous()


def inverse_perm(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# The trace (Node, tensor.Storage, tensor.State) is hidden from Python's cyclic
# GC: it never forms a cycle (nodes only reference older nodes; nothing they
# hold leads back to them or to a lazy tensor), and every collection would
# walk a long trace (a 2000-op chain cost more in collections than in
# recording).
untrack = _device.untrack


class Node:
    # __weakref__: lazymlir.trace.dynamic's marks on device data (no per-op cost).
    __slots__ = ("op", "args", "kwargs", "inputs", "sig", "meta", "data", "job", "kernels", "__weakref__")

    def __init__(self, op, args, kwargs, inputs, sig, meta):
        self.op = op  # an OpOverload, or operator.getitem on a multi-output node
        self.args = args  # constants and Nodes, as the op takes them
        self.kwargs = kwargs
        self.inputs = inputs  # the Nodes in args/kwargs, in order (key order)
        self.sig = sig  # hashable (op, constants) with inputs blanked out
        self.meta = meta  # meta tensor (or tuple of them) with shape and dtype
        self.data = None  # CPU tensor once computed (or being computed: see job)
        self.job = None  # the job (run._Job) writing data, until known done
        self.kernels = None  # kernel count of the compiled graph that computed data
        untrack(self)

    @staticmethod
    def leaf(tensor: torch.Tensor) -> "Node":
        """Device data: ``tensor`` (see :func:`device_data`) is owned by the
        trace from now on."""
        tensor = device_data(tensor)
        strided = not tensor.is_contiguous()
        n = Node(None, None, None, (), None, None)
        n.data = tensor
        key = (tensor.shape, tensor.stride(), tensor.dtype) if strided else (tensor.shape, tensor.dtype)
        n.meta = _leaf_metas.get(key)
        if n.meta is None:
            dtype = QUANTIZED_REPR.get(tensor.dtype, tensor.dtype)
            n.meta = _leaf_metas[key] = (
                torch.empty_strided(tensor.shape, tensor.stride(), dtype=dtype, device="meta")
                if strided
                else torch.empty(tensor.shape, dtype=dtype, device="meta")
            )
        return n

    def set_data(self, tensor: torch.Tensor, job=None, kernels=None) -> None:
        """The node has been computed (or ``job`` is computing it into ``tensor``,
        by a compiled graph of ``kernels`` kernels): it becomes a leaf and
        forgets its inputs, so later graphs start from this value instead of
        recomputing it."""
        self.data = tensor
        self.job = job
        self.kernels = kernels
        self.args = self.kwargs = self.sig = None
        self.inputs = ()

    def __repr__(self):
        if self.data is not None:
            return f"Data({tuple(self.data.shape)}, {self.data.dtype})"
        return f"Node({self.op}, {tuple(self.meta.shape) if isinstance(self.meta, torch.Tensor) else '...'})"


class _Blank:
    """Stands for a tensor input in a node's signature."""

    __slots__ = ()

    def __repr__(self):
        return "%"


BLANK = _Blank()


def freeze(value):
    """A hashable stand-in for a constant argument.  Python's ``==`` conflates
    1, 1.0 and True, and 0.0 and -0.0, and never matches NaN; all of them give
    different programs, so the key keeps their types and spellings apart."""
    t = type(value)
    if t is int or value is None:
        return value
    if t is float:
        return ("f", value) if value == value and value != 0.0 else ("f", repr(value))
    if t is bool:
        return ("b", value)
    if t is list or t is tuple:
        return tuple(freeze(v) for v in value)
    if isinstance(value, Node):
        return BLANK
    return value  # dtype, device, layout, memory_format, str


class Graph(NamedTuple):
    key: tuple  # hashable: the whole trace, inputs' shapes and dtypes, outputs
    inputs: List[Node]  # leaves, in placeholder order
    nodes: List[Node]  # ops, in topological order
    outputs: List[Node]
    # Lifted scalars (see _LIFT): (value, dtype) of the 0-dim inputs that follow
    # the leaves, and for each lifted node its (first scalar index, positions).
    scalars: list = []
    lifted: dict = {}
    # Memory formats at the boundary (see dense_perm): for each leaf, None
    # (contiguous) or the permutation that makes its device data contiguous:
    # the graph takes that buffer as is (a channels_last input arrives as an
    # NHWC placeholder followed by a permute to NCHW).  For each output, None or
    # the permutation of its eager layout: the graph returns the permuted value,
    # written into a contiguous buffer that is the output's storage.
    input_perms: list = []
    output_perms: list = []

    def input_values(self) -> List[torch.Tensor]:
        """The graph's arguments: the leaves' device data as contiguous buffers
        (permuted, not copied), then the lifted scalars."""
        if self.input_perms:
            values = [n.data if p is None else n.data.permute(p) for n, p in zip(self.inputs, self.input_perms)]
        else:
            values = [n.data for n in self.inputs]
        values.extend(_scalar_tensor(v, dt) for v, dt in self.scalars)
        return values

    def output_specs(self) -> list:
        """(shape, dtype) of the contiguous buffer each output is written into."""
        specs = []
        for o, p in zip(self.outputs, self.output_perms or [None] * len(self.outputs)):
            shape = tuple(o.meta.shape)
            specs.append((shape if p is None else tuple(shape[i] for i in p), o.meta.dtype))
        return specs

    def output_values(self, buffers: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The outputs as tensors of their logical shape, in their memory format,
        viewing the buffers they were written into."""
        if not self.output_perms:
            return list(buffers)
        return [b if p is None else b.permute(inverse_perm(p)) for b, p in zip(buffers, self.output_perms)]


# Lifted scalars.  A Python float given to an arithmetic op is a constant of the
# traced op; optimizers compute such floats from the step count (Adam's bias
# corrections) and schedulers from the epoch (learning rates), so as constants
# they would make every step a new graph: a recompilation storm.  Like
# torch._lazy, which turns scalars into device data, the graph takes them as
# 0-dim inputs of the op's result dtype instead, out of the cache key.  Every
# float, as in torch._lazy: keeping 1.0 a constant would recompile when a decayed
# learning rate leaves it.  Positions: argument indices or keyword names, per op.
_LIFT = {
    "aten.mul.Tensor": (1,),
    "aten.mul.Scalar": (1,),
    "aten.div.Tensor": (1,),
    "aten.div.Scalar": (1,),
    "aten.add.Tensor": (1, "alpha"),
    "aten.add.Scalar": (1, "alpha"),
    "aten.sub.Tensor": (1, "alpha"),
    "aten.sub.Scalar": (1, "alpha"),
    "aten.addcdiv.default": ("value",),
    "aten.addcmul.default": ("value",),
    "aten.lerp.Scalar": (2,),
}
# Integers compared with int64 tensors: a decode loop's position checks
# (`cache_position[-1] >= length`) compare with a number that grows by one
# per token; lifted as int64 0-dim inputs, one graph serves every length.
_COMPARE = {f"aten.{op}.Scalar": getattr(aten, op).Tensor for op in ("eq", "ne", "lt", "le", "gt", "ge")}
_LIFT.update(dict.fromkeys(_COMPARE, (1,)))
# A boolean tensor filled from a Python bool: generate's length criterion is
# ``torch.full((batch,), cur_len >= max_length)``, False at every token but
# the last; lifted, the last token runs the decode step's graph too.
_LIFT["aten.full.default"] = (1,)
LIFTED_OPS = frozenset(_LIFT)
_LIFTED = ("lifted",)  # stands for a lifted value in a signature

# 0-dim tensors of lifted scalars, by value: a step passes the same constants
# every time, and graphs never write their inputs. The key tells -0.0 from
# 0.0 (equal as floats); NaNs never hit (NaN != NaN) and the cap bounds them.
_scalar_tensors: dict = {}
_SCALAR_TENSORS_MAX = 4096


def _scalar_tensor(value: float, dtype: torch.dtype) -> torch.Tensor:
    key = (value, math.copysign(1.0, value), dtype)
    t = _scalar_tensors.get(key)
    if t is None:
        if len(_scalar_tensors) >= _SCALAR_TENSORS_MAX:
            _scalar_tensors.clear()
        t = _scalar_tensors[key] = torch.tensor(value, dtype=dtype)
    return t


_FLOATS = (torch.float32, torch.float64)


def _lift(n: Node):
    """([(position, value)] of the numbers of ``n`` that become graph inputs,
    their dtype)."""
    meta = n.meta
    if type(meta) is not torch.Tensor:
        return None, None
    if n.sig[0] == "aten.full.default":
        v = n.args[1] if len(n.args) > 1 else None
        if meta.dtype == torch.bool and type(v) is bool:
            return [(1, v)], torch.bool
        return None, None
    if n.sig[0] in _COMPARE:
        x = n.args[0]
        v = n.args[1] if len(n.args) > 1 else None
        if isinstance(x, Node) and x.meta.dtype == torch.int64 and type(v) is int:
            return [(1, v)], torch.int64
        return None, None
    if meta.dtype not in _FLOATS:
        return None, None
    found = []
    for pos in _LIFT[n.sig[0]]:
        if type(pos) is int:
            v = n.args[pos] if pos < len(n.args) else None
        else:
            v = n.kwargs.get(pos)
        if type(v) is float:
            found.append((pos, v))
    return found, meta.dtype


def _lifted_sig(sig, positions):
    op, args, kwargs = sig
    args = tuple(_LIFTED if i in positions else a for i, a in enumerate(args))
    kwargs = tuple((k, _LIFTED if k in positions else v) for k, v in kwargs)
    return (op, args, kwargs)


def _lifting(n: Node):
    """(positions, values, lifted signature, dtype) of the numbers of ``n``
    that become graph inputs, or None. collect() asks once per distinct
    (signature, result dtype, first input's dtype) and keeps the answer."""
    found, dtype = _lift(n)
    if not found:
        return None
    positions = tuple(p for p, _ in found)
    return positions, tuple(v for _, v in found), _lifted_sig(n.sig, positions), dtype


def collect(outputs: Sequence[Node], options: tuple = (), full: bool = False) -> Graph:
    """Walk back from ``outputs`` to device data, in a deterministic order, and
    build the cache key on the way: one tuple entry per node, ``(signature,
    input positions)`` (lifted floats blanked in the signature and listed in
    ``Graph.scalars``), ``(shape, dtype[, perm])`` for device data; then the
    outputs' positions and permutations, and ``options``.  C++
    (``frontend/csrc/Collect.cpp``): a barrier runs it over every node of the
    step. A trace whose key was seen before (by its fingerprint: signatures
    by identity, interned) gets that key without building it again, and
    ``lifted`` None; ``full`` builds everything (what compiling needs)."""
    return _device.collect(outputs, options, full)


def donated(key: tuple) -> tuple:
    """The (input, output) index pairs a graph key donates (run.execute adds
    them to the key's options): each output is written into that input's
    buffer. Empty for most graphs."""
    options = key[3]
    last = options[-1] if options else None
    return last[1] if type(last) is tuple and last and last[0] == "donate" else ()


def with_donations(graph: Graph, pairs: tuple) -> Graph:
    """``graph`` whose key also names the donated (input, output) pairs."""
    k = graph.key
    return graph._replace(key=(k[0], k[1], k[2], k[3] + (("donate", pairs),)))


def graph_hash(key: tuple) -> str:
    """A stable name for a graph (dump files, logs); computed on a miss only."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:16]


# In the graph every value is fresh and laid out contiguously, while a view op's
# validity depends on the strides the user saw.  reshape means the same thing on
# values and is always valid.
AS_RESHAPE = frozenset({aten.view.default, aten._unsafe_view.default})

# The FX node meta key of a static graph's values' meta tensors (to_fx).
VAL = "lazymlir_val"

# Ops that address their input's memory, not its value.
ADDRESSES_STORAGE = {aten.as_strided.default, aten.as_strided_scatter.default}


def map_nodes(a, fn):
    """``a`` (an argument: a Node, a constant, or lists of them) with fn applied to its Nodes."""
    if isinstance(a, Node):
        return fn(a)
    if type(a) is list or type(a) is tuple:
        return type(a)(map_nodes(v, fn) for v in a)
    return a


def to_fx(graph: Graph, rewrite=None, phantoms: int = 0) -> torch.fx.GraphModule:
    """The graph as an FX GraphModule of aten ops on CPU tensors: placeholders are
    the device-data inputs, then the lifted scalars; outputs are returned as a
    tuple.  ``rewrite(g, env, node, args, kwargs)`` (dynamic graphs) may replace
    a node's constant arguments by FX nodes before it is emitted; ``env`` maps
    each leaf to its FX value in the logical order, and ("phantom", j) to the
    j-th of ``phantoms`` placeholders after the scalars (lazymlir.trace.dynamic's
    free symbols: their sizes are integers of the graph)."""
    if graph.lifted is None:  # a key seen before (collect): built without what this needs
        graph = collect(graph.outputs, graph.key[3], full=True)
    g = torch.fx.Graph()
    env = {}
    perms = graph.input_perms or [None] * len(graph.inputs)
    # Static graphs: each value's meta tensor (its shape and dtype), which
    # eager_fx._into reads to run an op into a buffer that holds no live value.
    static = rewrite is None and phantoms == 0
    for i, (n, perm) in enumerate(zip(graph.inputs, perms)):
        env[n] = g.placeholder(f"arg{i}")
        if static and perm is None and type(n.meta) is torch.Tensor:
            env[n].meta[VAL] = n.meta
    scalars = [g.placeholder(f"scalar{i}") for i in range(len(graph.scalars))]
    for j in range(phantoms):
        env[("phantom", j)] = g.placeholder(f"phantom{j}")
    # Placeholders first (eager_fx._into adds the outputs' after them).
    for n, perm in zip(graph.inputs, perms):
        if perm is not None:  # the contiguous buffer of a dense layout: back to the logical order
            env[n] = g.call_function(aten.permute.default, (env[n], inverse_perm(perm)))

    def fx_arg(a):
        return map_nodes(a, env.__getitem__)

    for n in graph.nodes:
        op = n.op
        args, kwargs = n.args, n.kwargs
        lifted = graph.lifted.get(n)
        if lifted is not None:  # its lifted numbers read from their placeholders (not the key's integers)
            first, positions = lifted
            lifted = dict(zip(positions, scalars[first : first + len(positions)]))
            args = tuple(lifted.get(i, a) for i, a in enumerate(args))
            kwargs = {k: lifted.get(k, v) for k, v in kwargs.items()}
        if rewrite is not None:
            args, kwargs = rewrite(g, env, n, args, kwargs)
        if lifted is not None:
            env[n] = _lifted_call(g, n, fx_arg(args), {k: fx_arg(v) for k, v in kwargs.items()}, lifted, static)
        elif op in AS_RESHAPE:
            env[n] = g.call_function(aten.reshape.default, (env[args[0]], list(args[1])))
        elif op is operator.getitem:
            env[n] = g.call_function(operator.getitem, (env[args[0]], args[1]))
        elif op in ADDRESSES_STORAGE:
            # Recorded on a value laid out contiguously (ops._as_strided):
            # in eager execution of the graph, its input may be permuted.
            args = fx_arg(args)
            first = g.call_function(aten.clone.default, (args[0],), {"memory_format": torch.contiguous_format})
            env[n] = g.call_function(op, (first,) + tuple(args[1:]), {k: fx_arg(v) for k, v in kwargs.items()})
        else:
            env[n] = g.call_function(op, fx_arg(args), {k: fx_arg(v) for k, v in kwargs.items()})
            # The dtypes eager gives each result (lowering's float16/bfloat16
            # rounding reads them: some ops return float32 statistics too).
            metas = n.meta if isinstance(n.meta, (tuple, list)) else (n.meta,)
            env[n].meta["lazymlir_dtypes"] = tuple(m.dtype if isinstance(m, torch.Tensor) else None for m in metas)
        if static and type(n.meta) is torch.Tensor and isinstance(env[n], torch.fx.Node):
            env[n].meta[VAL] = n.meta
    outs = []
    for o, perm in zip(graph.outputs, graph.output_perms or [None] * len(graph.outputs)):
        v = env[o]
        if perm is not None:  # written as the contiguous buffer of its memory format
            v = g.call_function(aten.permute.default, (v, list(perm)))
        outs.append(v)
    g.output(tuple(outs))
    return torch.fx.GraphModule({}, g)


def _lifted_call(g, n, args, kwargs, s, static=False):
    """``n``'s op with its lifted floats read from the 0-dim placeholders ``s``
    (by position), evaluated in the order of eager's CPU kernels. ``static``:
    an intermediate product of a float tensor and a lifted number gets the
    tensors' meta when they have one shape and float dtype (a 0-dim float
    changes neither)."""

    def call(op, call_args, call_kwargs=None):
        node = g.call_function(op, call_args, call_kwargs)
        if static and op in (aten.mul.Tensor, aten.div.Tensor):
            vals = [a.meta.get(VAL) for a in call_args if isinstance(a, torch.fx.Node) and a not in lifts]
            val = vals[0] if vals else None
            if (
                val is not None
                and val.dtype.is_floating_point
                and all(v is not None and v.shape == val.shape and v.dtype == val.dtype for v in vals)
            ):
                node.meta[VAL] = val
        return node

    lifts = set(s.values())
    name = n.sig[0]
    args = [s.get(i, a) for i, a in enumerate(args)]
    if name.startswith(("aten.mul.", "aten.div.")):
        return call(aten.mul.Tensor if name.startswith("aten.mul.") else aten.div.Tensor, tuple(args[:2]))
    if name.startswith(("aten.add.", "aten.sub.")):  # self + alpha * other
        add = aten.add.Tensor if name.startswith("aten.add.") else aten.sub.Tensor
        other = args[1]
        if "alpha" in s:
            pair = (other, s["alpha"]) if isinstance(other, torch.fx.Node) else (s["alpha"], other)
            return call(add, (args[0], call(aten.mul.Tensor, pair)))
        return call(add, (args[0], other), kwargs)
    if name in ("aten.addcdiv.default", "aten.addcmul.default"):  # self + value * t1 / t2
        scaled = call(aten.mul.Tensor, (args[1], s["value"]))
        combine = aten.div.Tensor if name == "aten.addcdiv.default" else aten.mul.Tensor
        return call(aten.add.Tensor, (args[0], call(combine, (scaled, args[2]))))
    if name == "aten.lerp.Scalar":
        return call(aten.lerp.Tensor, tuple(args))
    if name in _COMPARE:
        return call(_COMPARE[name], tuple(args[:2]))
    if name == "aten.full.default":
        return call(aten.clone.default, (call(aten.expand.default, (args[1], list(args[0]))),))
    raise AssertionError(name)


# collect() in C++ (csrc/Collect.cpp) builds Graphs with these.
_device.install_collect(Graph, dense_perm, _lifting, _LIFT)
