"""Dynamic dimensions: one compiled graph for every size of a dimension.

A trace's cache key (``trace.collect``) splits into a *skeleton* (the ops,
which node feeds which, dtypes, every constant but integers) and its
*numbers*: the input sizes and the integer constants (view sizes, slice
bounds, ...), in key order.  When a graph is traced again with the skeleton
of one compiled before and different numbers, the input dimensions that
changed become symbols, and each other number that changed is fitted as a
function of them from the two traces (``a*s + b``, or ``a*s*t + b`` for the
product of two: a view to ``B*T`` rows).  That is a :class:`Template`: the
graph is compiled once, with those dimensions ``?`` in the IR and those
numbers computed from the inputs' sizes (``aten.sym_size``) in the FX graph.

A later trace runs the template's executable only when its numbers are
exactly the template's at its own sizes: the inputs' static dimensions and
every constant equal, every fitted number equal to its function, each
symbolic size at least 2 (size 1 broadcasts, and PyTorch specializes it),
and the guards the decomposition recorded about the symbols hold.  The
executable then computes exactly what the static graph of that trace would:
a wrong guess of a function only costs a compile, never a wrong value.

``mark_dynamic(t, dim)`` makes a dimension symbolic before a second size is
seen, ``mark_static(t, dim)`` keeps one static; ``LAZYMLIR_DYNAMIC=0``
(``config.dynamic``) turns the automatic part off.
"""

import operator
import weakref
from typing import Dict, List, Optional

import torch

from . import config, metrics

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
# Marks: lazymlir.mark_dynamic / mark_static (tracer.marks), on the device
# data of a tensor.

_marks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # leaf Node -> {dim: bool}


def mark(leaf, dim: int, dynamic: bool) -> None:
    """Mark dimension ``dim`` (non-negative) of the device data ``leaf`` (a
    trace Node) dynamic or static: lazymlir.mark_dynamic / mark_static
    (tracer.marks) for a lazy tensor."""
    _marks.setdefault(leaf, {})[dim] = dynamic


def _leaf_marks(graph, leaf_starts) -> Dict[int, bool]:
    """Number index -> marked dynamic (True) or static (False)."""
    found = {}
    if not len(_marks):
        return found
    for leaf, start in zip(graph.inputs, leaf_starts):
        m = _marks.get(leaf)
        if m:
            for dim, value in m.items():
                found[start + dim] = value
    return found


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
        self.entry = None  # the compiled graph (compilation._Compiled)
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
        shapes of the trace's (``specs``: trace.Graph.output_specs), the
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


def phantom_inputs(entry, graph) -> List[torch.Tensor]:
    """The phantom inputs ``graph``'s run of the dynamic ``entry`` takes."""
    return entry.template.phantoms(decompose(graph.key)[1])


def _eval(expr, numbers) -> int:
    a, syms, b = expr
    for s in syms:
        a *= numbers[s]
    return a + b


def _fit(c0: int, c1: int, n0, n1, changed: List[int]):
    """A function of the changed symbols taking c0 at n0 and c1 at n1: the
    simplest first (no offset before an offset, one symbol before two)."""
    found = []
    for k in changed:
        d = n1[k] - n0[k]
        if d and (c1 - c0) % d == 0:
            a = (c1 - c0) // d
            found.append((c0 - a * n0[k] != 0, 0, (a, (k,), c0 - a * n0[k])))
    for x in range(len(changed)):
        for y in range(x, len(changed)):
            k, j = changed[x], changed[y]
            p0, p1 = n0[k] * n0[j], n1[k] * n1[j]
            if p1 != p0 and (c1 - c0) % (p1 - p0) == 0:
                a = (c1 - c0) // (p1 - p0)
                found.append((c0 - a * p0 != 0, 1, (a, (k, j), c0 - a * p0)))
    return min(found)[2] if found else None


def _guess(c: int, n, marked: List[int]):
    """A function of the marked symbols for a number seen once (mark_dynamic):
    the symbol itself, or a multiple of it."""
    for k in marked:
        v = n[k]
        if c == v:
            return (1, (k,), 0)
    for k in marked:
        v = n[k]
        if v > 2 and c > v and c % v == 0:
            return (c // v, (k,), 0)
    return None


class _Family:
    """Everything compiled for one skeleton: the numbers of the last trace
    compiled for it (the base the next one is compared with: after a
    refused template for batch and length both changing, the length alone
    changing from the last trace still generalizes) and its templates."""

    __slots__ = ("base", "templates", "looked_on_disk")

    def __init__(self, base):
        self.base = base  # None until a trace of it is compiled here; then the last one
        self.templates: List[Template] = []
        self.looked_on_disk = False


_families: Dict[tuple, _Family] = {}
_MAX_TEMPLATES = 8


_template_count = 0


def clear() -> None:
    global _template_count
    _families.clear()
    _template_count = 0


def has_templates() -> bool:
    return _template_count > 0


def _leaf_positions(leaf_starts, numbers_len, graph):
    """number index -> (input position, dimension) for every input size."""
    where = {}
    for i, (leaf, start) in enumerate(zip(graph.inputs, leaf_starts)):
        for d in range(len(leaf.data.shape)):
            where[start + d] = (i, d)
    return where


def lookup(graph, disk=None):
    """The compiled entry of a template ``graph`` is an instance of, or None.
    Called on an in-memory cache miss; the caller caches the entry under the
    graph's own key. ``disk``: (load, read) callables of the disk cache, to
    find templates an earlier process compiled for this skeleton (see
    :func:`save`): ``read(skeleton)`` gives their records, ``load(template,
    graph)`` the entry of one that matches (None when gone from disk)."""
    skeleton, numbers, _ = decompose(graph.key)
    family = _families.get(skeleton)
    if disk is not None and (family is None or not family.looked_on_disk):
        if family is None:
            _families[skeleton] = family = _Family(None)
        family.looked_on_disk = True
        _adopt(family, disk[1](skeleton))
    if family is None or not family.templates:
        return None
    inputs = None
    for t in family.templates:
        if t.failed or (t.entry is None and t.graph_key is None):
            continue
        if inputs is None:
            inputs = graph.input_values()
        args = t.instance_args(numbers, inputs)
        if args is not None:
            if not t.outputs_match(args, graph.output_specs()):
                metrics.counter("DynamicOutputShapeMismatch")
                continue
            if t.entry is None:
                t.entry = disk[0](t, graph) if disk is not None else None
                if t.entry is None:
                    t.failed = True
                    continue
            metrics.counter("DynamicGraphHit")
            return t.entry
    return None


def _adopt(family, records) -> None:
    global _template_count
    for d in records or ():
        try:
            t = Template.from_json(d)
        except (KeyError, TypeError, ValueError):
            continue
        if not any(old.symbols == t.symbols for old in family.templates):
            family.templates.append(t)
            _template_count += 1


def save(graph, template, read, write) -> None:
    """Keep ``template`` (compiled) in the disk cache under its skeleton, with
    the others already there: ``read(skeleton)`` / ``write(skeleton, records)``."""
    skeleton = decompose(graph.key)[0]
    records = [d for d in (read(skeleton) or ()) if sorted(d.get("symbols", ())) != sorted(template.symbols)]
    write(skeleton, (records + [template.to_json()])[-_MAX_TEMPLATES:])


# Scalar arguments that only set a size (arange's end: the values are 0, 1,
# ..., end - 1). Other Scalars are values: a symbolic one may be specialized
# by a decomposition without a guard (pow's exponent became x*x*x).
_SCALAR_SIZES = {"aten::arange": ("end",)}
_arg_kinds: dict = {}


def _schema_kinds(op):
    """(positional flags, {name: flag}) of ``op``'s arguments: whether an
    integer there may be symbolic (a SymInt in the schema)."""
    kinds = _arg_kinds.get(op)
    if kinds is None:
        positional, named = [], {}
        schema = getattr(op, "_schema", None)
        if schema is not None:
            text = str(schema)
            inner = text[text.index("(") + 1 : text.rindex(") ->")]
            parts, depth, cur = [], 0, ""
            for ch in inner:
                if ch in "[(":
                    depth += 1
                elif ch in "])":
                    depth -= 1
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += ch
            parts.append(cur)
            keyword_only = False
            for part in (p.strip() for p in parts):
                if not part:
                    continue
                if part == "*":
                    keyword_only = True
                    continue
                words = part.split()
                if len(words) < 2:
                    continue
                name = words[1].split("=")[0]
                flag = words[0].startswith("SymInt") or name in _SCALAR_SIZES.get(schema.name, ())
                named[name] = flag
                if not keyword_only:
                    positional.append(flag)
        kinds = _arg_kinds[op] = (positional, named)
    return kinds


def _symbolic_capable(graph) -> set:
    """The numbers (indices, see decompose) of ``graph`` that sit in an
    argument that may be symbolic: input sizes and SymInt arguments (view
    sizes, slice bounds, select indices, ...)."""
    capable = set()
    pos = 0
    nodes = iter(graph.nodes)
    for e in graph.key[0]:
        head = e[0]
        if type(head) is torch.Size:
            capable.update(range(pos, pos + len(head)))
            pos += len(head)
            continue
        n = next(nodes)
        positional, named = _schema_kinds(n.op) if isinstance(n.op, torch._ops.OpOverload) else ([], {})
        counter = [pos]

        def walk(v, flag):
            t = type(v)
            if t is int:
                if flag:
                    capable.add(counter[0])
                counter[0] += 1
            elif t is list or t is tuple:
                for x in v:
                    walk(x, flag)

        for i, a in enumerate(n.args):
            walk(a, i < len(positional) and positional[i])
        for k, a in n.kwargs.items():
            walk(a, named.get(k, False))
        counted = []
        _split(head, counted)
        if counter[0] - pos != len(counted):  # arguments and signature disagree: nothing symbolic here
            capable.difference_update(range(pos, pos + len(counted)))
        pos += len(counted)
    return capable


def note_static(graph) -> None:
    """``graph`` runs a static graph compiled earlier (from the disk cache):
    it becomes the base its skeleton's next trace is compared with, as if
    compiled here."""
    skeleton, numbers, _ = decompose(graph.key)
    _families.setdefault(skeleton, _Family(None)).base = numbers


def generalize(graph) -> Optional[Template]:
    """The template to compile ``graph`` as (a new one, its entry not
    compiled yet), or None: compile it static.  ``graph`` becomes the base
    its skeleton's next trace is compared with."""
    skeleton, numbers, leaf_starts = decompose(graph.key)
    family = _families.get(skeleton)
    if family is None:
        _families[skeleton] = family = _Family(None)
    try:
        return _generalize(graph, family, numbers, leaf_starts)
    finally:
        family.base = numbers


def _generalize(graph, family, numbers, leaf_starts) -> Optional[Template]:
    marks = _leaf_marks(graph, leaf_starts)
    where = _leaf_positions(leaf_starts, len(numbers), graph)
    forced = sorted(k for k, v in marks.items() if v and numbers[k] >= 2)
    pinned = {k for k, v in marks.items() if not v}
    if family.base is None:  # the first trace of this skeleton compiled here
        if not forced:
            return None
        base = numbers
        symbols = list(forced)
        exprs = {}
        capable = _symbolic_capable(graph)
        for i, c in enumerate(numbers):
            if i not in where and i in capable:
                e = _guess(c, numbers, symbols)
                if e is not None:
                    exprs[i] = e
    else:
        if not (config.dynamic or forced) or len(family.templates) >= _MAX_TEMPLATES:
            return None
        base = family.base
        if len(base) != len(numbers):
            return None
        changed = [i for i, (a, b) in enumerate(zip(base, numbers)) if a != b]
        symbols = sorted({i for i in changed if i in where} | set(forced))
        if not changed or pinned & set(symbols) or any(numbers[s] < 2 for s in symbols):
            return None
        moved = [s for s in symbols if base[s] != numbers[s]]
        capable = _symbolic_capable(graph)
        exprs = {}
        free = []
        for i in changed:
            if i in where:
                continue
            if i not in capable:
                return None  # a value (an exponent, a fill value), not a size
            e = _fit(base[i], numbers[i], base, numbers, moved) if moved else None
            if e is None:
                # An integer that changed with no input size to explain it
                # (a slice bound, the size of a tensor made from nothing):
                # a symbol of its own, the size of a phantom input.
                if numbers[i] < 2:
                    return None
                free.append(i)
                moved.append(i)
                continue
            exprs[i] = e
        symbols = sorted(set(symbols) | set(free))
        for j, i in enumerate(free):
            where[i] = (-1 - j, 0)
        if forced:  # numbers that did not change may still follow a marked symbol
            for i, c in enumerate(numbers):
                if i not in where and i not in exprs and c == base[i] and i in capable:
                    e = _guess(c, numbers, [s for s in forced if s not in moved])
                    if e is not None:
                        exprs[i] = e
        base = numbers
    t = Template(tuple(base), frozenset(symbols), exprs, {s: where[s] for s in symbols})
    for old in family.templates:
        if not old.failed and any(
            old.base[i] != c for i, c in enumerate(numbers) if i not in old.symbols and i not in old.exprs
        ):
            # The old one is for other constants (another batch size: a
            # generate with batch 1, then one with batch 4): not a fit that
            # failed for this trace.
            continue
        if old.symbols == t.symbols and (old.failed or not set(t.exprs) > set(old.exprs)):
            # Compiled before for these symbols, and this trace is not an
            # instance: a number that is not the function fitted (or a guard
            # that failed). More fits from two sizes would guess again:
            # sizes like this one compile static. Unless this fit follows
            # more numbers than the old one (one that stayed equal by chance
            # between the old one's two traces, B * T of 4 x 16 and 2 x 32):
            # that can happen only so many times.
            return None
    global _template_count
    family.templates.append(t)
    _template_count += 1
    return t


class Misaligned(Exception):
    """A node's arguments do not hold the integers of its signature in key
    order: the graph cannot be made dynamic (it compiles static)."""


def fx_rewriter(template: Template, graph):
    """The ``rewrite`` for trace.to_fx: each fitted number becomes FX
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

        # The same order as the signature (trace.signature / freeze): the
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
