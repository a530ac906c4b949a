"""Storages made by a fill get their value at their first write.

An optimizer makes its state with ``zeros_like`` in its first step and
updates it in place; recorded as an op, the fill would make the first
step's graph differ from every later one (where the state is device data):
two compiles, and a warm process's first step would run eagerly unless
that graph too were on disk. Computed when the first write is recorded
(``tensor._write``; the fast path's ``writeValue`` calls :func:`filled`
too), the fill is device data with a ``prior`` like any state."""

import torch

from .. import metrics
from ..trace.ir import device_data, Node

aten = torch.ops.aten


# Made by these ops, a storage's value is computed when something first writes
# into it (:func:`filled`).
FILLS = {
    aten.zeros.default: 0,
    aten.zeros_like.default: 0,
    aten.ones.default: 1,
    aten.ones_like.default: 1,
    aten.full.default: 1,  # the index of the fill value in args
    aten.full_like.default: 1,
}


def filled(node: Node) -> None:
    """``node`` (a fill, the value of a storage about to be written) as
    device data: the write can then update it in place like any state
    (donation), and the first step's graph is the next steps'."""
    fill = FILLS[node.op]
    if node.op in (aten.full.default, aten.full_like.default):
        fill = node.args[fill]
        if not isinstance(fill, (int, float, bool)):
            return
    meta = node.meta
    if not isinstance(meta, torch.Tensor):
        return
    value = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype).fill_(fill)
    node.set_data(device_data(value))
    metrics.counter("FilledAtWrite")
