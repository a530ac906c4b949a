"""Op handlers for the ops the common ones do not fit: copies and transfers,
batch norm, dropout, foreach ops, threshold_backward, max pooling and its
backward (by the indices it made), scalar reads, resize_, LSTM and GRU
cells and packed sequences (rnn), and the factories the handlers use.
``ops`` looks them up in ``_SPECIAL`` and ``_POOLING``."""

import math
import weakref

import torch

from .. import _device
from ..trace.ir import Node
from ..dtypes import SUPPORTED as SUPPORTED_DTYPES
from .tensor import (
    _CPU,
    _fresh,
    _from_cpu,
    _intern,
    _intern_like,
    _META,
    _op_node,
    _rebind,
    _resize_out,
    _value,
    _write,
    _zeros_node,
    state,
)
from .handlers import _alias, _call, _cast, _functional, _named, _split, _view
from .barriers import _cpu_alias
from .fallback import _eager
from . import rnn

aten = torch.ops.aten


def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if state(dst) is None:  # lazy -> cpu (or another device)
        return dst.copy_(_cpu_alias(src), *args[2:])
    if state(src) is not None:
        v = _value(src)
    else:
        v = Node.leaf(src.detach().to(_CPU, copy=True))
    if dst.dtype not in SUPPORTED_DTYPES or v.meta.dtype not in SUPPORTED_DTYPES:
        if v.meta.shape == dst.shape and v.meta.dtype == dst.dtype:
            _write(dst, v)  # a plain move needs no compute
            return dst
        return _eager(func, args, kwargs)
    if tuple(v.meta.shape) != tuple(dst.shape):
        meta = _intern_like(aten.copy.default(state(dst).meta, v.meta))
        v = _op_node(aten.copy.default, (_value(dst), v), {}, meta)
    elif v.meta.dtype != dst.dtype:
        v = _cast(v, dst.dtype)
    _write(dst, v)
    return dst


def _to_copy(func, args, kwargs):
    target = kwargs.get("device")
    if target is not None and target.type != "lazy":
        out = aten._to_copy.default(_cpu_alias(args[0]), **dict(kwargs, device=_CPU))
        return out if target.type == "cpu" else out.to(target)
    _check_device(target)
    if state(args[0]) is None:  # onto the lazy device: its copy is device data, nothing to record
        return _from_cpu(aten._to_copy.default(args[0], **dict(kwargs, device=_CPU)))
    return _functional(func, args, kwargs)


def _check_device(device) -> None:
    """Refuse a lazy device index other than 0 (``lazy:1``), as the device
    guard does: there is one lazy device."""
    if device is not None and device.index not in (None, 0):
        raise RuntimeError(f"lazymlir has a single lazy device, index 0 (got {device})")


def _batch_norm(func, args, kwargs):
    """native_batch_norm updates the running statistics in training mode although
    its schema does not say so: record the functional form and write them back."""
    a = _named(func, args, kwargs)
    rm, rv = a["running_mean"], a["running_var"]
    if rm is None or rv is None:
        return _functional(func, args, kwargs)
    common = (a["input"], a["weight"], a["bias"], rm, rv)
    if not a["training"]:
        return _batch_norm_no_training(
            aten._native_batch_norm_legit_no_training.default, common + (a["momentum"], a["eps"]), {}
        )
    if state(rm) is None or state(rv) is None:
        return _eager(func, args, kwargs)
    outs = _functional(aten._native_batch_norm_legit_functional.default, common + (True, a["momentum"], a["eps"]), {})
    out, save_mean, save_invstd, new_rm, new_rv = outs
    _write(rm, _value(new_rm))
    _write(rv, _value(new_rv))
    return out, save_mean, save_invstd


def _batch_norm_no_training(func, args, kwargs):
    """Eager CPU returns empty saved statistics in evaluation mode (the meta
    kernel says [C], the lowering's CPU decomposition [0]): the graph records
    the normalized output only."""
    outs = _functional(func, args, kwargs)
    if not isinstance(outs, (tuple, list)):
        return outs
    empty = torch.empty(0, dtype=outs[1].dtype)
    return outs[0], _from_cpu(empty), _from_cpu(empty.clone())


def _batch_norm_backward(func, args, kwargs):
    """In evaluation mode the saved statistics are empty (eager CPU's, and
    _batch_norm's) and the backward reads the running ones: the empty
    tensors go as None, which the schema allows, instead of zero-size values
    that would keep the op out of the compiled graph."""
    a = _named(func, args, kwargs)
    if not a["train"]:
        for name in ("save_mean", "save_invstd"):
            if isinstance(a[name], torch.Tensor) and a[name].numel() == 0:
                a[name] = None
    return _functional(func, tuple(a.values()), {})


def _native_dropout(func, args, kwargs):
    """Training-mode dropout without cutting the trace: only the random mask is
    drawn now, on the CPU generator, exactly as eager CPU dropout draws it
    (empty_like(input).bernoulli_(1 - p).div_(1 - p)), so results and the random
    stream match eager; the multiply is recorded."""
    a = _named(func, args, kwargs)
    x, p, train = a["input"], a["p"], a["train"]
    if state(x) is None or train is False or not 0.0 < p < 1.0 or x.numel() == 0:
        return _functional(func, args, kwargs)
    # empty_like: eager draws the mask in the memory order of the input (NHWC too)
    noise = torch.empty_like(state(x).meta, device=_CPU).bernoulli_(1 - p).div_(1 - p)
    out = _functional(aten.mul.Tensor, (x, _from_cpu(noise)), {})
    return out, _from_cpu(noise != 0)


def _foreach(func):
    """_foreach_<op>[_] as a loop of per-tensor ops, like eager's slow path
    (foreach_tensor_*_slow): each element is recorded by its own handler, so
    optimizer steps with foreach=True trace into the same graph as a for-loop.
    ``None`` when there is no per-tensor op to map to (the op then runs eagerly)."""
    schema = func._schema
    name = schema.name.split("::")[1][len("_foreach_") :]
    inplace = name.endswith("_")
    base = name[:-1] if inplace else name
    if base == "norm":
        per = aten.linalg_vector_norm
    else:
        per = getattr(aten, base + "_", None) if inplace else None
        per = per or getattr(aten, base, None)
    if per is None or func._overloadname == "Tensor" and base in ("addcdiv", "addcmul"):
        return None  # scalars given as a tensor (capturable): no per-tensor form
    writes_back = inplace and not per.__name__.endswith("_")  # e.g. maximum: no maximum_
    listed = [isinstance(a.type, torch.ListType) for a in schema.arguments]
    # Positional foreach arguments past the per-tensor op's positional ones are
    # its keyword-only ones (addcdiv's scalars -> value).
    per_schemas = [getattr(per, o)._schema for o in per.overloads()]
    n_pos = max(sum(not a.kwarg_only for a in s.arguments) for s in per_schemas)
    kw_only = next(
        [a.name for a in s.arguments if a.kwarg_only]
        for s in per_schemas
        if sum(not a.kwarg_only for a in s.arguments) == n_pos
    )
    names = {a.name: i for i, a in enumerate(schema.arguments)}

    def handler(_, args, kwargs):
        n = next(len(a) for a, is_list in zip(args, listed) if is_list)
        results = []
        for i in range(n):
            pos = [a[i] if is_list else a for a, is_list in zip(args, listed)]
            kw = {k: (v[i] if listed[names[k]] else v) for k, v in kwargs.items()}
            if len(pos) > n_pos:
                kw.update(zip(kw_only, pos[n_pos:]))
                pos = pos[:n_pos]
            if base == "norm" and len(pos) > 1:
                kw["dtype"] = kw.get("dtype", pos[2] if len(pos) > 2 else None)
                pos = pos[:2]
            elif i == 0 and not writes_back:
                _foreach_plan(func, per, n_pos, kw_only, len(args), kwargs, pos, kw)
            r = per(*pos, **kw)
            if writes_back:
                args[0][i].copy_(r)
            results.append(r)
        return None if inplace else results

    return handler


def _foreach_plan(func, per, n_pos, kw_only, n_args, kwargs, pos, kw):
    """Hands the loop of :func:`_foreach` to C++ (csrc/Foreach.cpp) from the
    next call on: the per-element overload Python's argument parser picks
    for the first element's ``pos`` and ``kw``, and for each of its
    arguments the foreach argument it comes from (element i of a list, or
    the same value every time) or its default. The foreach call had
    ``n_args`` positional arguments (the first of its schema) and
    ``kwargs``; they map to ``pos`` and ``kw`` as in :func:`_foreach`."""
    formals = func._schema.arguments
    names = {a.name: i for i, a in enumerate(formals)}
    src_pos, src_kw = list(range(n_args)), {k: names[k] for k in kwargs}
    if n_args > n_pos:
        src_kw.update(zip(kw_only, src_pos[n_pos:]))
        src_pos = src_pos[:n_pos]
    try:
        overload = getattr(per, torch._C._jit_resolve_packet(per._qualified_op_name, *pos, **kw))
    except (RuntimeError, AttributeError):
        return
    sources = []
    for j, formal in enumerate(overload._schema.arguments):
        src = src_pos[j] if not formal.kwarg_only and j < len(pos) else src_kw.get(formal.name)
        if src is None:
            if not formal.has_default_value():
                return
            sources.append((-1, False))
        else:
            sources.append((src, isinstance(formals[src].type, torch.ListType)))
    if len(sources) - sources.count((-1, False)) != len(pos) + len(kw):
        return  # an argument the overload takes elsewhere: Python goes on
    _device.foreach_plan(func, overload, sources)


def _threshold_backward(func, args, kwargs):
    """Eager CPU promotes mixed dtypes (an int64 gradient and a float32 input
    give float32); the meta kernel, and the graph, keep the gradient's."""
    grad, x = args[0], args[1]
    if isinstance(grad, torch.Tensor) and isinstance(x, torch.Tensor) and grad.dtype != x.dtype:
        return _eager(func, args, kwargs)
    return _functional(func, args, kwargs)


# Max pooling's indices and the pooling that made them, by their trace node
# (the indices tensor's value until it is written): only such indices lie in
# their own windows, which decompositions._max_pool2d_backward relies on.
_pool_indices = weakref.WeakKeyDictionary()


def _pool2d_key(kernel_size, stride, padding, dilation, ceil_mode, input_shape):
    def pair(v, default):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        v = v or default
        return tuple(int(x) for x in (v * 2 if len(v) == 1 else v))

    kernel = pair(kernel_size, [])
    return (
        kernel,
        pair(stride, list(kernel)),
        pair(padding, [0]),
        pair(dilation, [1]),
        bool(ceil_mode),
        tuple(input_shape[-2:]),
    )


_POOL2D_NAMES = ("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode")


def _max_pool2d_with_indices(func, args, kwargs):
    outs = _functional(func, args, kwargs)
    if isinstance(outs, (tuple, list)) and len(outs) == 2 and state(outs[1]) is not None:
        a = {"stride": [], "padding": 0, "dilation": 1, "ceil_mode": False}
        a.update(zip(_POOL2D_NAMES, args))
        a.update(kwargs)
        _pool_indices[_value(outs[1])] = _pool2d_key(
            a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"], a["self"].shape
        )
    return outs


def _max_pool2d_indices_backward(func, args, kwargs):
    """Indices from max_pool2d_with_indices with the same pooling: recorded as
    is (decompositions._max_pool2d_backward: a gather over each window).  Any
    other indices (a caller's, repeated, outside their windows) are honoured
    as eager's kernel does: each gradient added at its index of the input's
    H*W plane, -1 skipped (a scatter_add)."""
    a = _named(func, args, kwargs)
    grad, x, indices = a["grad_output"], a["self"], a["indices"]
    if not all(state(t) is not None for t in (grad, x, indices)):
        return _eager(func, args, kwargs)
    key = _pool2d_key(a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"], x.shape)
    if _pool_indices.get(_value(indices)) == key:
        return _functional(func, args, kwargs)
    return _scatter_pool_backward(func, args, kwargs, grad, x, indices, 2)


def _scatter_pool_backward(func, args, kwargs, grad, x, indices, spatial):
    """grad_input of a max pooling over the last ``spatial`` dimensions from
    its gradient and flat indices, as eager's CPU kernels compute it."""
    try:
        meta_args = [state(a).meta if state(a) is not None else a for a in args]
        expected = func(*meta_args, **{k: state(v).meta if state(v) is not None else v for k, v in kwargs.items()})
    except Exception:
        return _eager(func, args, kwargs)  # eager's error
    if (
        expected.numel() == 0
        or grad.numel() == 0
        or grad.shape != indices.shape
        or expected.dtype != grad.dtype
        or grad.dim() <= spatial
    ):
        return _eager(func, args, kwargs)
    lead = list(grad.shape[:-spatial])
    plane = math.prod(x.shape[-spatial:])
    g = _call(aten.reshape.default, (grad, lead + [-1]), {})
    i = _call(aten.reshape.default, (indices, lead + [-1]), {})
    keep = _call(aten.ne.Scalar, (i, -1), {})
    i = _call(aten.where.ScalarOther, (keep, i, 0), {})
    g = _call(aten.where.ScalarOther, (keep, g, 0), {})
    zeros = _call(aten.new_zeros.default, (g, lead + [plane]), {})
    r = _call(aten.scatter_add.default, (zeros, len(lead), i, g), {})
    r = _call(aten.reshape.default, (r, list(expected.shape)), {})
    if state(r) is not None and r.stride() != expected.stride():  # eager keeps the input's channels_last
        r = _call(aten.clone.default, (r,), {"memory_format": torch._prims_common.suggest_memory_format(expected)})
    if state(r) is None or r.stride() != expected.stride():
        return _eager(func, args, kwargs)
    return r


def _scalar(func, args, kwargs):
    """.item(), bool(): a barrier that returns a Python value. A condition
    (one bool: ``if (ids == pad).any():``) whose value needs only a few new
    ops runs them eagerly (run.execute's ``condition``)."""
    t = args[0]
    return func(_cpu_alias(t, condition=t.dtype == torch.bool and t.numel() == 1))


def _resize_(func, args, kwargs):
    """Eager keeps a resized tensor's elements in storage order: within its
    storage, the tensor becomes a contiguous view of it at its offset (its
    aliases see writes into it: composite out= kernels resize their out).
    Past the storage, eager grows it and leaves the new elements
    uninitialized (here: zeros), and the tensor gets a storage of its own
    (its old aliases do not follow)."""
    self, size = args[0], list(args[1])
    if tuple(self.shape) == tuple(size):
        return self
    if state(self) is not None and math.prod(size) > 0 and _resize_out(self, size):
        return self
    if state(self) is None or not self.is_contiguous() or self.storage_offset():
        raise NotImplementedError("lazymlir: resizing a lazy view or a non-contiguous lazy tensor is not supported")
    n, old = math.prod(size), self.numel()
    if old == 0:
        _rebind(self, _empty(size, dtype=self.dtype))
        return self
    flat = _functional(aten.reshape.default, (self, [old]), {})
    if n <= old:
        flat = _functional(aten.slice.Tensor, (flat, 0, 0, n), {})
    else:
        flat = _functional(aten.cat.default, ([flat, _empty([n - old], dtype=self.dtype)],), {})
    _rebind(self, _functional(aten.reshape.default, (flat, size), {}))
    return self


def _unsupported(func, args, kwargs):
    raise NotImplementedError(f"lazymlir: {func} (changes a tensor's metadata in place) is not supported yet")


# In-place RNG fills that never read the tensor they fill.
_OVERWRITES = {"normal_", "uniform_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"}

_SPECIAL = {
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: _alias,
    aten._local_scalar_dense.default: _scalar,
    aten.is_nonzero.default: _scalar,
    aten.split.Tensor: _split,
    aten.split.sizes: _split,
    aten.split_with_sizes.default: _split,
    aten.unsafe_split.Tensor: _split,
    aten.unsafe_split_with_sizes.default: _split,
    aten.unbind.int: _split,
    # Not a view to autograd, but an alias in eager (as_strided on it counts
    # from the storage's start, writes through it reach its base).
    aten._unsafe_view.default: _view,
    aten.resize_.default: _resize_,
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
    aten.native_batch_norm_backward.default: _batch_norm_backward,
    aten.native_dropout.default: _native_dropout,
    aten.set_.source_Tensor: _unsupported,
    aten.threshold_backward.default: _threshold_backward,
    **rnn.HANDLERS,
}

# Recorded by their own handlers, unless config.force_fallback names them.
_POOLING = {
    aten.max_pool2d_with_indices.default: _max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward.default: _max_pool2d_indices_backward,
}


# Factories the handlers use too (registered for the Lazy key in registration).


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    meta = _intern_like(
        torch.empty(size, dtype=dtype, device=_META, memory_format=memory_format or torch.contiguous_format)
    )
    if meta.numel() == 0:  # no value to compute
        return _from_cpu(torch.empty_strided(meta.shape, meta.stride(), dtype=dtype))
    return _fresh(_zeros_node(size, dtype, meta), meta)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    meta = _intern(size, stride, dtype)
    if meta.numel() == 0:  # no value to compute
        return _from_cpu(torch.empty_strided(size, stride, dtype=dtype))
    return _fresh(_zeros_node(size, dtype, meta), meta)
