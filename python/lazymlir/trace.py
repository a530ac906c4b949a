"""The functional trace: IR nodes, graph collection and the cache key.

A :class:`Node` is one aten op applied to other nodes and constants, or, once it
has been computed (or came from the user), a leaf holding device data: a
contiguous CPU tensor that nothing ever writes to.  Nodes only point backwards,
so the graph a barrier needs is what is reachable from the tensors it reads, and
dead intermediate nodes are freed by reference counting.  Aliasing and
mutation never reach this level: ``device.py`` rewrites them functionally.
"""

import hashlib
import operator
from typing import List, NamedTuple, Sequence

import torch

aten = torch.ops.aten


_leaf_metas = {}


class Node:
    __slots__ = ("op", "args", "kwargs", "inputs", "sig", "meta", "data", "job")

    def __init__(self, op, args, kwargs, inputs, sig, meta):
        self.op = op  # an OpOverload, or operator.getitem on a multi-output node
        self.args = args  # constants and Nodes, as the op takes them
        self.kwargs = kwargs
        self.inputs = inputs  # the Nodes in args/kwargs, in order (key order)
        self.sig = sig  # hashable (op, constants) with inputs blanked out
        self.meta = meta  # meta tensor (or tuple of them) with shape and dtype
        self.data = None  # CPU tensor once computed (or being computed: see job)
        self.job = None  # the Future of the worker job writing data, until known done

    @staticmethod
    def leaf(tensor: torch.Tensor) -> "Node":
        """Device data: ``tensor`` is owned by the trace from now on."""
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        n = Node(None, None, None, (), None, None)
        n.data = tensor
        key = (tensor.shape, tensor.dtype)
        n.meta = _leaf_metas.get(key)
        if n.meta is None:
            n.meta = _leaf_metas[key] = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
        return n

    def set_data(self, tensor: torch.Tensor, job=None) -> None:
        """The node has been computed (or ``job`` is computing it into ``tensor``):
        it becomes a leaf and forgets its inputs, so later graphs start from this
        value instead of recomputing it."""
        self.data = tensor
        self.job = job
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


def collect(outputs: Sequence[Node], options: tuple = ()) -> Graph:
    """Walk back from ``outputs`` to device data, in a deterministic order, and
    build the cache key on the way: one tuple entry per node."""
    index = {}
    entries = []
    inputs = []
    nodes = []
    for out in outputs:
        if out in index:
            continue
        stack = [out]
        while stack:
            n = stack[-1]
            if n in index:
                stack.pop()
                continue
            if n.data is not None:
                index[n] = len(entries)
                d = n.data
                entries.append((d.shape, d.dtype))
                inputs.append(n)
                stack.pop()
                continue
            missing = [i for i in n.inputs if i not in index]
            if missing:
                missing.reverse()
                stack.extend(missing)
                continue
            stack.pop()
            index[n] = len(entries)
            entries.append((n.sig, tuple([index[i] for i in n.inputs])))
            nodes.append(n)
    key = (tuple(entries), tuple([index[o] for o in outputs]), options)
    return Graph(key, inputs, nodes, list(outputs))


def graph_hash(key: tuple) -> str:
    """A stable name for a graph (dump files, logs); computed on a miss only."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:16]


# In the graph every value is fresh and laid out contiguously, while a view op's
# validity depends on the strides the user saw.  reshape means the same thing on
# values and is always valid.
_AS_RESHAPE = {aten.view.default, aten._unsafe_view.default}


def map_nodes(a, fn):
    """``a`` (an argument: a Node, a constant, or lists of them) with fn applied to its Nodes."""
    if isinstance(a, Node):
        return fn(a)
    if type(a) is list or type(a) is tuple:
        return type(a)(map_nodes(v, fn) for v in a)
    return a


def to_fx(graph: Graph) -> torch.fx.GraphModule:
    """The graph as an FX GraphModule of aten ops on CPU tensors: placeholders are
    the device-data inputs, outputs are returned as a tuple."""
    g = torch.fx.Graph()
    env = {}
    for i, n in enumerate(graph.inputs):
        env[n] = g.placeholder(f"arg{i}")

    def fx_arg(a):
        return map_nodes(a, env.__getitem__)

    for n in graph.nodes:
        op = n.op
        if op in _AS_RESHAPE:
            env[n] = g.call_function(aten.reshape.default, (env[n.args[0]], list(n.args[1])))
        elif op is operator.getitem:
            env[n] = g.call_function(operator.getitem, (env[n.args[0]], n.args[1]))
        else:
            env[n] = g.call_function(op, fx_arg(n.args), {k: fx_arg(v) for k, v in n.kwargs.items()})
    g.output(tuple(env[o] for o in graph.outputs))
    return torch.fx.GraphModule({}, g)
