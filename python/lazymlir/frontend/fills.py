"""Storages made by a fill get their value at their first write.

An optimizer makes its state with ``zeros_like`` in its first step and
updates it in place; recorded as an op, the fill would make the first
step's graph differ from every later one (where the state is device data):
two compiles, and a warm process's first step would run eagerly unless
that graph too were on disk. Computed when the first write is recorded
(``tensor._write``; the fast path's ``writeValue`` calls :func:`filled`
too), the fill is device data with a ``prior`` like any state."""

import torch

from .. import _device, metrics
from ..trace.ir import device_data, Node

aten = torch.ops.aten


# A storage whose value is made by one of these gets it when something first
# writes into it (:func:`filled`).
FILLS = frozenset(
    (
        aten.zeros.default,
        aten.zeros_like.default,
        aten.ones.default,
        aten.ones_like.default,
        aten.full.default,
        aten.full_like.default,
    )
)


def _fill_value(node: Node):
    if node.op in (aten.full.default, aten.full_like.default):
        return node.args[1]  # (size, value), (self, value)
    return 0 if node.op in (aten.zeros.default, aten.zeros_like.default) else 1


def filled(storage) -> None:
    """``storage``'s value (a fill, about to be written into) as device data:
    the write can then update it in place like any state (donation). The
    storage leaves the pending list; the write registers it again, last,
    where the steps after the first register it: the first step's graph is
    the next steps'."""
    node = storage.base
    fill, meta = _fill_value(node), node.meta
    if not isinstance(fill, (int, float, bool)) or not isinstance(meta, torch.Tensor):
        return
    value = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype).fill_(fill)
    node.set_data(device_data(value))
    _device.unregister_pending(storage)
    metrics.counter("FilledAtWrite")
