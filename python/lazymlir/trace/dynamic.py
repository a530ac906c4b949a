"""Dynamic dimensions: one compiled graph for every size of a dimension.

A trace's cache key (``ir.collect``) splits into a *skeleton* (the ops,
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

import weakref
from typing import Dict, List, Optional

import torch

from .. import config, metrics
from .template import _split, decompose, Template

# ----------------------------------------------------------------------------
# Marks: lazymlir.mark_dynamic / mark_static (frontend.marks), on the device
# data of a tensor.

_marks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # leaf Node -> {dim: bool}


def mark(leaf, dim: int, dynamic: bool) -> None:
    """Mark dimension ``dim`` (non-negative) of the device data ``leaf`` (a
    trace Node) dynamic or static: lazymlir.mark_dynamic / mark_static
    (frontend.marks) for a lazy tensor."""
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


def phantom_inputs(entry, graph) -> List[torch.Tensor]:
    """The phantom inputs ``graph``'s run of the dynamic ``entry`` takes."""
    return entry.template.phantoms(decompose(graph.key)[1])


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
