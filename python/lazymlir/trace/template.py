"""A template: one dynamic graph of a trace's skeleton (lazymlir.trace.dynamic
finds it). Which numbers of the trace are symbols (input dimensions) and which
are functions of them; whether a later trace's numbers are exactly this
template's at its own sizes; and the FX rewrite that computes those numbers
from the inputs' sizes (``aten.sym_size``) when the graph is compiled."""

import operator
from typing import Dict, List

import torch

aten = torch.ops.aten

_INT = ("int",)  # where a number was, in a skeleton


def _split(value, numbers: list):
    t = type(value)
    if t is int:
        numbers.append(value)
        return _INT
    if t is tuple or t is list:
        return tuple([_split(v, numbers) for v in value])
    return value


def decompose(key: tuple):
    """(skeleton, numbers, first number of each leaf's sizes) of a graph key."""
    entries, outputs, perms, options = key
    numbers = []
    skeleton = []
    leaf_starts = []
    for e in entries:
        head = e[0]
        if type(head) is torch.Size:  # a leaf: (shape, dtype[, perm])
            leaf_starts.append(len(numbers))
            numbers.extend(head)
            skeleton.append((len(head),) + e[1:])
        else:  # (signature, input indices): structure, kept
            skeleton.append((_split(head, numbers), e[1]))
    return (tuple(skeleton), outputs, perms, options), numbers, leaf_starts


# ----------------------------------------------------------------------------
# Templates.


class Template:
    """A dynamic graph: which numbers are symbols (input dimensions), which
    are functions of them, and the compiled entry."""

    __slots__ = (
        "base",
        "symbols",
        "exprs",
        "leaf_of",
        "free",
        "entry",
        "guards",
        "failed",
        "graph_key",
        "output_sizes",
        "size_symbols",
    )

    def __init__(self, base, symbols, exprs, leaf_of):
        self.base = base  # the numbers of the trace it was made from
        self.symbols = symbols  # frozenset of number indices (input dimensions)
        self.exprs = exprs  # number index -> (a, (symbol indices...), b): a * prod(symbols) + b
        # symbol index -> (input position, dimension); a free symbol (an
        # integer that changed with no input size) is the size of phantom
        # input j, an int8 vector passed after the graph's arguments:
        # (-1 - j, 0).
        self.leaf_of = leaf_of
        self.free = tuple(sorted((s for s in symbols if leaf_of[s][0] < 0), key=lambda s: -leaf_of[s][0]))
        self.entry = None  # the compiled graph (execution.entries.Compiled)
        # What the decomposition assumed of the symbols: a ShapeEnv guard
        # expression over the graph's arguments t0, t1, ... (None: nothing).
        self.guards = None
        self.failed = False
        self.graph_key = None  # the native compiler's disk key of a template loaded from disk
        # The compiled graph's output sizes (ints or expressions over
        # size_symbols: {name: (argument, dimension)}), from its symbolic
        # trace: each instance's output buffers are checked against them.
        self.output_sizes = None
        self.size_symbols = None

    def instance_args(self, numbers, inputs):
        """The compiled graph's arguments for a trace with these numbers and
        inputs (the inputs, then the phantom inputs of the free symbols), or
        None when the trace is not an instance of this template."""
        if not self._numbers_match(numbers):
            return None
        args = inputs + self.phantoms(numbers) if self.free else inputs
        return args if self._guards_hold(args) else None

    def _numbers_match(self, numbers) -> bool:
        base = self.base
        if len(numbers) != len(base):
            return False
        symbols, exprs = self.symbols, self.exprs
        for i, v in enumerate(numbers):
            if i in symbols:
                if v < 2:
                    return False
            elif i in exprs:
                a, syms, b = exprs[i]
                p = a
                for s in syms:
                    p *= numbers[s]
                if p + b != v:
                    return False
            elif v != base[i]:
                return False
        return True

    def _guards_hold(self, inputs) -> bool:
        if self.guards is not None:
            from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

            try:  # ShapeEnv.evaluate_guards_expression, without a ShapeEnv
                return bool(eval(self.guards, SYMPY_INTERP, {"L": {f"t{i}": a for i, a in enumerate(inputs)}}))
            except Exception:
                return False
        return True

    def outputs_match(self, inputs, specs) -> bool:
        """Whether the compiled graph's outputs at these inputs have the
        shapes of the trace's (``specs``: ir.Graph.output_specs), the
        buffers the runtime allocates: the compiled code writes what it
        computes into them, so a difference would write out of bounds."""
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        if self.output_sizes is None or len(self.output_sizes) != len(specs):
            return False
        values = {name: inputs[i].shape[d] for name, (i, d) in self.size_symbols.items()}
        try:
            for sizes, (shape, _) in zip(self.output_sizes, specs):
                if len(sizes) != len(shape):
                    return False
                for size, want in zip(sizes, shape):
                    got = size if type(size) is int else int(eval(size, SYMPY_INTERP, values))
                    if got != want:
                        return False
        except Exception:
            return False
        return True

    def to_json(self) -> dict:
        return {
            "base": list(self.base),
            "symbols": sorted(self.symbols),
            "exprs": [[i, a, list(syms), b] for i, (a, syms, b) in sorted(self.exprs.items())],
            "leaf_of": [[s, i, d] for s, (i, d) in sorted(self.leaf_of.items())],
            "guards": self.guards,
            "graph": self.entry.executable.cache_key,
            "output_sizes": self.output_sizes,
            "size_symbols": {k: list(v) for k, v in self.size_symbols.items()},
        }

    @staticmethod
    def from_json(d: dict) -> "Template":
        t = Template(
            tuple(d["base"]),
            frozenset(d["symbols"]),
            {i: (a, tuple(syms), b) for i, a, syms, b in d["exprs"]},
            {s: (i, d_) for s, i, d_ in d["leaf_of"]},
        )
        t.guards = d["guards"]
        t.graph_key = str(d["graph"])
        t.output_sizes = d["output_sizes"]
        t.size_symbols = {k: tuple(v) for k, v in d["size_symbols"].items()}
        return t

    def dynamic_dims(self, n_inputs: int) -> List[set]:
        dims = [set() for _ in range(n_inputs)]
        for s in self.symbols:
            i, d = self.leaf_of[s]
            if i >= 0:
                dims[i].add(d)
        return dims

    def phantoms(self, numbers) -> List[torch.Tensor]:
        """The phantom inputs of the free symbols at these numbers."""
        return [_phantom(numbers[s]) for s in self.free]

    def describe(self) -> str:
        return ", ".join(
            f"input {i} dim {d}" if i >= 0 else f"integer #{s}"
            for s, (i, d) in sorted(self.leaf_of.items(), key=lambda x: x[1])
        )


_phantoms: Dict[int, torch.Tensor] = {}


def _phantom(n: int) -> torch.Tensor:
    """A vector of ``n`` bytes whose size carries a free symbol's value into
    a compiled graph (never read)."""
    t = _phantoms.get(n)
    if t is None:
        if len(_phantoms) > 256:
            _phantoms.clear()
        t = _phantoms[n] = torch.zeros(n, dtype=torch.int8)
    return t


def _eval(expr, numbers) -> int:
    a, syms, b = expr
    for s in syms:
        a *= numbers[s]
    return a + b


class Misaligned(Exception):
    """A node's arguments do not hold the integers of its signature in key
    order: the graph cannot be made dynamic (it compiles static)."""


def fx_rewriter(template: Template, graph):
    """The ``rewrite`` for ir.to_fx: each fitted number becomes FX
    arithmetic on ``aten.sym_size`` of the inputs, each free symbol the size
    of its phantom input. Each node's integers are matched with its
    signature's, value by value; after to_fx, ``rewrite.check()`` raises
    :class:`Misaligned` unless every integer was seen and every symbolic one
    replaced: a literal left where a size varies would give other sizes a
    wrong result."""
    _, numbers, _ = decompose(graph.key)
    # Where each node's numbers start among the graph's numbers: the key's
    # entries are the leaves and the nodes, in the order of graph.nodes.
    first = {}
    pos = 0
    nodes = iter(graph.nodes)
    expected = 0
    for e in graph.key[0]:
        head = e[0]
        if type(head) is torch.Size:
            pos += len(head)
        else:
            counted = []
            _split(head, counted)
            first[next(nodes)] = (pos, pos + len(counted))
            pos += len(counted)
            expected += len(counted)
    exprs = template.exprs
    free = set(template.free)
    syms = {}
    seen = [0]
    replaced = set()

    def symbol(g, env, s):
        node = syms.get(s)
        if node is None:
            i, d = template.leaf_of[s]
            source = env[graph.inputs[i]] if i >= 0 else env[("phantom", -1 - i)]
            node = syms[s] = g.call_function(aten.sym_size.int, (source, d))
        return node

    def rewrite(g, env, n, args, kwargs):
        start, end = first[n]
        counter = [start]

        def sub(v):
            t = type(v)
            if t is int:
                i = counter[0]
                counter[0] += 1
                if i >= end or numbers[i] != v:
                    raise Misaligned(
                        f"{n.op}: integer {v} where its signature has {numbers[i] if i < end else 'nothing'}"
                    )
                seen[0] += 1
                if i in free:
                    replaced.add(i)
                    return symbol(g, env, i)
                e = exprs.get(i)
                if e is None:
                    return v
                replaced.add(i)
                a, ss, b = e
                x = symbol(g, env, ss[0])
                for s in ss[1:]:
                    x = g.call_function(operator.mul, (x, symbol(g, env, s)))
                if a != 1:
                    x = g.call_function(operator.mul, (x, a))
                if b:
                    x = g.call_function(operator.add, (x, b))
                return x
            if t is list or t is tuple:
                return t(sub(x) for x in v)
            return v

        # The same order as the signature (ir.signature / freeze): the
        # arguments, then the keyword arguments' values.
        args = sub(args)
        kwargs = {key: sub(v) for key, v in kwargs.items()}
        if counter[0] != end:
            raise Misaligned(f"{n.op}: {counter[0] - start} integers in its arguments, {end - start} in its signature")
        return args, kwargs

    def check():
        missing = (set(exprs) | free) - replaced
        if seen[0] != expected or missing:
            raise Misaligned(f"{seen[0]} of {expected} integers seen; not replaced: {sorted(missing)}")

    rewrite.check = check
    return rewrite
