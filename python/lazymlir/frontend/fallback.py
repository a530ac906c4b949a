"""Ops run eagerly on CPU: inputs materialized, results back on the lazy
device as device data (``aten::<op>`` counters); zero-size tensors."""

import torch

from .. import metrics
from .tensor import _from_cpu, _rebind, _resize_out, state, _write
from .barriers import _cpu_alias
from .meta import _eager_arg
from ..trace.ir import Node

aten = torch.ops.aten


def _zero_size(func, args, kwargs, meta):
    """An op with a zero-size tensor among its inputs or outputs.  When every
    output is empty its value is known (there is none): empty tensors of the
    meta layout, nothing runs.  Otherwise (a reduction or contraction over an
    empty dimension: sum gives zeros, var NaN, mm zeros) the op runs eagerly;
    its empty inputs need no data, so nothing is synced for them."""
    metas = [meta] if isinstance(meta, torch.Tensor) else list(meta) if isinstance(meta, (list, tuple)) else None
    if metas is not None and all(m is None or (isinstance(m, torch.Tensor) and m.numel() == 0) for m in metas):
        outs = [
            None if m is None else _from_cpu(torch.empty_strided(m.shape, m.stride(), dtype=m.dtype)) for m in metas
        ]
        return outs[0] if isinstance(meta, torch.Tensor) else type(meta)(outs)
    return _eager(func, args, kwargs)


def _make_eager(count: bool, overwrites: bool = False):
    def handler(func, args, kwargs):
        return _eager(func, args, kwargs, count=count, overwrites=overwrites)

    return handler


def _eager(func, args, kwargs, count: bool = True, overwrites: bool = False):
    """Run ``func`` on CPU on materialized inputs; results go back on the lazy device.

    ``overwrites``: the op writes every element of its first argument without
    reading it (RNG fills), so that argument is not computed first."""
    schema = func._schema
    if count:
        metrics.counter(schema.name)
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    names = [a.name for a in schema.arguments]
    targets = []  # (lazy tensor, the CPU tensor the op writes in its place)

    def convert(a, name):
        if state(a) is not None:
            if name not in written:
                return _cpu_alias(a)  # read-only use of device data
            if overwrites and name == names[0]:
                cpu = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
            else:
                cpu = _cpu_alias(a).clone()
            targets.append((a, cpu))
            return cpu
        if name in written and type(a) in (list, tuple):  # Tensor(a!)[]: _foreach_*_ ops
            return type(a)(convert(x, name) for x in a)
        return _eager_arg(a)

    cpu_args = [convert(a, names[i] if i < len(names) else None) for i, a in enumerate(args)]
    cpu_kwargs = {k: convert(v, k) for k, v in kwargs.items()}
    out = func(*cpu_args, **cpu_kwargs)
    for lazy, cpu in targets:
        if cpu.shape != lazy.shape:
            # The op resized its out= argument: so does the lazy tensor, in
            # its own storage where that holds the result (aliases see it).
            if not _resize_out(lazy, cpu.shape, cpu.stride()):
                _rebind(lazy, _from_cpu(cpu))
                continue
        _write(lazy, Node.leaf(cpu))

    def wrap(r):
        if isinstance(r, torch.Tensor):
            for lazy, cpu in targets:  # in-place and out= ops return their argument
                if r is cpu:
                    return lazy
            return _from_cpu(r)
        return r

    if isinstance(out, torch.Tensor):
        return wrap(out)
    if isinstance(out, (tuple, list)):
        return type(out)(wrap(r) for r in out)
    return out
