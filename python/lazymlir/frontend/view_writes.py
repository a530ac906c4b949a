"""Writes through views that no scatter op inverts (``tensor._scatter``):
a broadcasting ``expand``, ``unfold`` and ``as_strided``, whose places may
overlap (one element seen at several places of the view).

The view addresses the value under it as its strides would on a contiguous
tensor; without overlap, a write is an ``as_strided_scatter`` there. With
overlap, eager writes each element once per place it is seen at, the last
write in time winning: so every place the op left unchanged keeps the
element's old value, and an element takes the new value from a place that
changed it (``x[:1].expand(3, 4)[2] = 5``, a ``fill_`` of the whole view).
Two places that change one element differently (``add_`` on overlapping
windows) have no single answer in eager either (its TensorIterator order):
here one of them wins. "Changed" compares values: -0.0 written over 0.0
at an overlapping place is not a change."""

import torch

from ..trace.ir import Node
from .tensor import _CPU, _indexed_scatter, _intern, _intern_like, _op_node, _view_node, signature, WRITE_BASE

aten = torch.ops.aten

# (op name and constants, shape under the view) -> (size, stride, offset, overlapping).
_layouts = {}


def _layout(step, shape):
    """Where the view ``step`` of a contiguous tensor of ``shape`` sits in
    it: (size, stride, offset, whether its places may overlap)."""
    key = (step.sig, tuple(shape))
    found = _layouts.get(key)
    if found is None:
        m = step.op(torch.empty(shape, device="meta"), *step.rest, **step.kwargs)
        size, stride = list(m.shape), list(m.stride())
        found = _layouts[key] = (size, stride, m.storage_offset(), not _apart(size, stride))
    return found


def _apart(size, stride) -> bool:
    """Whether no two places of a view with ``size`` and ``stride`` address
    one element: each dimension's stride, smallest first, steps past all
    that the smaller ones reach (enough, not needed: a view this does not
    prove apart is written as an overlapping one, which is right for both)."""
    if 0 in size:
        return True
    reach = 0
    for st, n in sorted((abs(st), n) for n, st in zip(size, stride) if n > 1):
        if st <= reach:
            return False
        reach += (n - 1) * st
    return True


def _node(op, args, kwargs=None) -> Node:
    """A node of ``op`` on nodes and constants, its meta from theirs."""
    kwargs = kwargs or {}
    metas = [a.meta if isinstance(a, Node) else a for a in args]
    return _op_node(op, args, kwargs, _intern_like(op(*metas, **kwargs)))


def indexed_scatter(step, base: Node, src: Node) -> Node:
    """The value of ``base`` after ``src`` is written into its view ``step``."""
    size, stride, offset, overlapping = _layout(step, base.meta.shape)
    if not overlapping:
        return _op_node(aten.as_strided_scatter.default, (base, src, size, stride, offset), {}, base.meta)
    if base is WRITE_BASE:
        raise NotImplementedError("recorded by tensor._write")  # several nodes: not a recipe of one
    old = _view_node(step, base)
    changed = _node(aten.ne.Tensor, (src, old))
    if src.meta.dtype.is_floating_point or src.meta.dtype.is_complex:  # NaN stays NaN: not a change
        not_both_nan = _node(
            aten.logical_or.default, (_node(aten.eq.Tensor, (src, src)), _node(aten.eq.Tensor, (old, old)))
        )
        changed = _node(aten.logical_and.default, (changed, not_both_nan))
    n = base.meta.numel()
    shape = list(base.meta.shape)
    places = _op_node(
        aten.arange.default, (n,), {"dtype": torch.int64, "device": _CPU}, _intern((n,), (1,), torch.int64)
    )
    places = _node(step.op, (_node(aten.view.default, (places, shape)),) + step.rest, step.kwargs)
    # Unchanged places write into one element past the end, which is dropped.
    places = _node(aten.reshape.default, (_node(aten.where.ScalarOther, (changed, places, n)), [-1]))
    padded = _node(aten.constant_pad_nd.default, (_node(aten.reshape.default, (base, [-1])), [0, 1], 0))
    flat_src = _node(aten.reshape.default, (src, [-1]))
    args = (padded, [places], flat_src, False)
    meta = _intern_like(aten.index_put.default(padded.meta, [places.meta], flat_src.meta, False))
    put = Node(
        aten.index_put.default, args, {}, (padded, places, flat_src), signature(aten.index_put.default, args, {}), meta
    )
    return _node(aten.reshape.default, (_node(aten.slice.Tensor, (put, 0, 0, n)), shape))


_indexed_scatter[:] = [indexed_scatter]  # tensor._scatter's hook (this module imports tensor)
