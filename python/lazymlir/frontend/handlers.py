"""The common op handlers: functional ops recorded as trace nodes (with
output metadata from meta tensors), views (a step on the storage's view
chain), in-place ops (the functional variant written back through the
view chain) and out= variants. ``ops`` picks one for each OpOverload."""

import operator

import torch

from .fallback import _eager, _zero_size
from ..trace.ir import BLANK, freeze, LIFTED_OPS, Node
from .tensor import (
    _fresh,
    _handler_of,
    handler_for,
    _intern_like,
    _oid,
    _op_names,
    _rebind,
    _resize_out,
    _state_value,
    _storage_view,
    _value,
    _view_node,
    _wrap,
    _write,
    LAZY,
    signature,
    state,
    ViewStep,
)
from .meta import _convert_all, _FAILED, _FLOAT, _infer, _meta_cache, _meta_sig
from . import view_writes  # noqa: F401  (installs tensor._scatter's hook for overlapping views)

aten = torch.ops.aten


def _wrap_outputs(node: Node, meta):
    """LazyTensors for a recorded op's result(s)."""
    if isinstance(meta, torch.Tensor):
        return _fresh(node, meta)
    outs = []
    for i, m in enumerate(meta):
        if m is None:
            outs.append(None)
            continue
        item = Node(operator.getitem, (node, i), {}, (node,), (operator.getitem, i), m)
        outs.append(_fresh(item, m))
    return type(meta)(outs)


def _functional(func, args, kwargs):
    if not kwargs:
        # The common case, kept lean: tensors and Python scalars, positionally.
        inputs, keys, frozen, node_args = [], [], [], []
        floats = False
        name = _op_names.get(id(func)) or _oid(func)
        for a in args:
            t = type(a)
            st = state(a)
            if st is not None:
                v = _state_value(st)
                inputs.append(v)
                node_args.append(v)
                keys.append(id(st.meta))
                frozen.append(BLANK)
            elif t is float:  # freeze(), inlined
                frozen.append(("f", a) if a == a and a != 0.0 else ("f", repr(a)))
                node_args.append(a)
                floats = True
            elif t is int or t is bool:
                frozen.append(freeze(a))
                node_args.append(a)
            else:
                break
        else:
            sig = (name, tuple(frozen), ())
            if floats and name in LIFTED_OPS:  # _meta_sig(sig), built directly
                msig = (name, tuple([_FLOAT if type(a) is float else f for a, f in zip(args, frozen)]), ())
            else:
                msig = sig
            hit = _meta_cache.get((msig, tuple(keys)))
            if hit is not None and hit is not _FAILED and hit[1]:
                meta = hit[0]
                if type(meta) is torch.Tensor:
                    node = Node(func, tuple(node_args), {}, tuple(inputs), sig, meta)
                    return _fresh(node, meta)
    meta_args, meta_kwargs, node_args, node_kwargs, inputs, frozen, keys = _convert_all(args, kwargs)
    sig = (_oid(func),) + frozen
    hit = _infer((_meta_sig(sig), keys), func, meta_args, meta_kwargs)
    if hit is _FAILED or not hit[1]:
        if hit is not _FAILED and hit[2]:
            if func is aten.cat.default:
                return _cat_skipping_empty(args, kwargs, hit[0])
            return _zero_size(func, args, kwargs, hit[0])
        return _eager(func, args, kwargs)
    meta = hit[0]
    return _wrap_outputs(Node(func, node_args, node_kwargs, inputs, sig, meta), meta)


def _cat_skipping_empty(args, kwargs, meta):
    """``cat`` with empty tensors among its inputs (a KV cache's first
    ``cat([empty, keys])``, in every Hugging Face forward): they add no
    element, so the others are concatenated in the trace and cast to the
    dtype eager promotes to over all of them; only an empty result is
    known without running anything (_zero_size)."""
    tensors = args[0] if args else kwargs["tensors"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    rest = [t for t in tensors if t.numel() != 0]
    if not rest or type(meta) is not torch.Tensor or meta.numel() == 0:
        return _zero_size(aten.cat.default, args, kwargs, meta)
    out = _functional(aten.cat.default, (rest, dim), {})
    if out.dtype != meta.dtype:
        out = _functional(aten._to_copy.default, (out,), {"dtype": meta.dtype})
    return out


def _view(func, args, kwargs):
    self = args[0]
    st = state(self)
    if st is None:
        return _functional(func, args, kwargs)
    if func is aten.as_strided.default:
        return _as_strided(func, args, kwargs)
    step = _view_step(func, st, tuple(args[1:]), kwargs)
    if step is _FAILED:
        if func is aten._reshape_alias.default:  # strides that no reshape gives: it addresses the storage
            size, stride = (list(args[1:]) + [kwargs.get("size"), kwargs.get("stride")])[:2]
            return _as_strided(aten.as_strided.default, (self, size, stride, self.storage_offset()), {})
        return _eager(func, args, kwargs)
    node = _view_node(step, _state_value(st))
    return _wrap(step.meta, st.storage, st.chain + (step,), node)


def _view_step(func, st, rest, kwargs):
    """The ViewStep of view ``func`` on a tensor of State ``st`` (cached), or _FAILED."""
    sig = signature(func, rest, kwargs)
    key = (sig, id(st.meta))
    step = _meta_cache.get(key)
    if step is None:
        try:
            meta = _intern_like(func(st.meta, *rest, **kwargs))
            if func is aten._reshape_alias.default and meta.stride() != aten.view.default(st.meta, rest[0]).stride():
                raise ValueError("not reshape's view: its value is not the reshaped one")
            step = ViewStep(func, rest, kwargs, meta, sig)
        except Exception:
            step = _FAILED
        _meta_cache[key] = step
    return step


def _as_strided(func, args, kwargs):
    """as_strided addresses the storage, not its input: recorded on the
    storage's base value (tensor._storage_view), whatever chain of views led
    to ``self``.  A storage it cannot address that way runs it eagerly."""
    self = args[0]
    a = dict(zip(("size", "stride", "storage_offset"), args[1:]))
    a.update(kwargs)
    offset = a.get("storage_offset")
    if offset is None:  # as_strided keeps the input's own offset, counted from the storage's start
        offset = self.storage_offset()
    found = _storage_view(self, a["size"], a["stride"], offset)
    if found is None:
        return _eager(func, args, kwargs)  # eager's error, or a storage with no dense order
    chain, meta = found
    s = state(self).storage
    value = s.base
    for step in chain:
        value = _view_node(step, value)
    return _wrap(meta, s, chain, value)


def _inplace_view(view):
    """x.transpose_(...) and friends change x's own sizes and strides: x becomes
    the view ``view(x, ...)`` (same storage), as ``x.data = view`` would make it."""

    def handler(func, args, kwargs):
        self = args[0]
        if state(self) is None:
            return _eager(func, args, kwargs)
        v = _view(view, args, kwargs)
        if state(v) is None or state(v).storage is not state(self).storage:
            raise NotImplementedError(f"lazymlir: {func} on this tensor is not supported yet")
        _rebind(self, v)
        return self

    return handler


def _alias(func, args, kwargs):
    """detach/alias: same storage, same value, new tensor (autograd sees a new one)."""
    st = state(args[0])
    return _wrap(st.meta, st.storage, st.chain, _state_value(st))


def _split(func, args, kwargs):
    """split/unbind as slices/selects: single-output views the write path knows.
    unsafe_split's pieces are views in eager too (only autograd does not know)."""
    self = args[0]
    if state(self) is None:
        return _eager(func, args, kwargs)
    if func is aten.unbind.int:
        try:
            n = len(func(state(self).meta, *args[1:], **kwargs))
        except Exception:
            return _eager(func, args, kwargs)
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        return tuple(_view(aten.select.int, (self, dim, i), {}) for i in range(n))
    steps = _slices(func, args, kwargs)
    if steps is None:
        return _eager(func, args, kwargs)
    st = state(self)
    value = _state_value(st)
    return [_wrap(step.meta, st.storage, st.chain + (step,), _view_node(step, value)) for step in steps]


# split's overloads whose pieces the C++ fast path makes (csrc/FastPath.cpp, kSplit).
_SLICED = (
    aten.split.Tensor,
    aten.split_with_sizes.default,
    aten.unsafe_split.Tensor,
    aten.unsafe_split_with_sizes.default,
)


def _slices(func, args, kwargs):
    """The ViewSteps of split ``func``'s pieces: slices of ``args[0]`` along
    its dim; None when they are not known."""
    st = state(args[0])
    try:
        metas = func(st.meta, *args[1:], **kwargs)
    except Exception:
        return None
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    dim %= max(st.meta.dim(), 1)
    steps, start = [], 0
    for m in metas:
        n = m.shape[dim]
        step = _view_step(aten.slice.Tensor, st, (dim, start, start + n, 1), {})
        if step is _FAILED:
            return None
        steps.append(step)
        start += n
    return steps


def _cast(node: Node, dtype) -> Node:
    args, kwargs = (node,), {"dtype": dtype}
    sig = (_oid(aten._to_copy.default), (BLANK,), (("dtype", dtype),))
    meta = _infer((sig, (id(node.meta), node.meta)), aten._to_copy.default, (node.meta,), kwargs)[0]
    return Node(aten._to_copy.default, args, kwargs, (node,), sig, meta)


def _write_as(t, node: Node) -> None:
    """``t`` now holds ``node``, cast to ``t``'s dtype where it differs
    (in-place and out= ops write results of the dtype they promote to)."""
    if node.meta.dtype != t.dtype:
        node = _cast(node, t.dtype)
    _write(t, node)


def _inplace(functional):
    """x.op_(...) records op(x, ...) and writes the result back into x's storage."""

    def handler(func, args, kwargs):
        self = args[0]
        st = state(self)
        if st is None:
            return _eager(func, args, kwargs)
        meta_args, meta_kwargs, node_args, node_kwargs, inputs, frozen, keys = _convert_all(args, kwargs)
        hit = _inplace_hit(functional, st.meta, frozen, keys, meta_args, meta_kwargs)
        if hit is _FAILED or not hit[1]:
            return _eager(func, args, kwargs)  # eager raises its own error, or copes
        _write_as(self, Node(functional, node_args, node_kwargs, inputs, (_oid(functional),) + frozen, hit[0]))
        return self

    handler.functional = functional  # the fast path records it too (fast_info)
    return handler


def _inplace_hit(functional, target, frozen, keys, meta_args, meta_kwargs):
    """(meta, ok) of the functional form of an in-place op on a tensor laid
    out as ``target`` (cached), or _FAILED: ok when its result can be written
    back (same shape, a dtype that casts to the tensor's, no overlap)."""
    msig = _meta_sig((_oid(functional),) + frozen)
    key = ("inplace", msig, keys)
    hit = _meta_cache.get(key)
    if hit is None:
        hit = _infer((msig, keys), functional, meta_args, meta_kwargs)
        if hit is not _FAILED:
            meta, ok, _ = hit
            ok = ok and (
                isinstance(meta, torch.Tensor)
                and meta.shape == target.shape
                and (meta.dtype == target.dtype or torch.can_cast(meta.dtype, target.dtype))
                and (functional in _FILLS or torch._debug_has_internal_overlap(target) != 1)
            )
            hit = (meta, ok)
        _meta_cache[key] = hit
    return hit


# In-place ops eager runs on a tensor whose elements overlap (an expanded
# one): each element gets one value wherever it is seen (view_writes).
_FILLS = frozenset((aten.fill.Scalar, aten.fill.Tensor, aten.zero.default))


def _named(func, args, kwargs) -> dict:
    """``func``'s arguments by their schema names, in schema order (an
    omitted one is its default, or None)."""
    named = {}
    for i, formal in enumerate(func._schema.arguments):
        if i < len(args):
            named[formal.name] = args[i]
        elif formal.name in kwargs:
            named[formal.name] = kwargs[formal.name]
        else:
            named[formal.name] = formal.default_value if formal.has_default_value() else None
    return named


def _out_variant(func):
    """add.out -> (add.Tensor, extra kwarg names): the functional overload taking the
    same arguments minus ``out`` (plus optional keywords such as dtype/device)."""
    schema = func._schema
    outs = [a for a in schema.arguments if a.is_out]
    if len(outs) != 1:
        return None
    base = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    packet = getattr(aten, schema.name.split("::")[1], None)
    for name in packet.overloads() if packet is not None else ():
        f = getattr(packet, name)
        args = f._schema.arguments
        if f._schema.is_mutable or [(a.name, str(a.type)) for a in args[: len(base)]] != base:
            continue
        extra = args[len(base) :]
        if all(a.kwarg_only and a.has_default_value() for a in extra):
            return f, {a.name for a in extra}
    return None


# Ops whose CPU kernels resize an out= tensor only when its number of
# elements differs (RangeFactories.cpp): arange(1, 13, out=zeros(3, 4)) fills
# the (3, 4) tensor in order.  Every other out= op gives it the result's
# shape (resize_output); found by a sweep over OpInfo's out= ops.
_KEEPS_OUT_SHAPE = {"aten::arange", "aten::range", "aten::linspace", "aten::logspace"}


def _handler(op):
    """``op``'s handler (classified on first use)."""
    return _handler_of(id(op)) or handler_for(op)


def _call(op, args, kwargs):
    """``op``'s handler on lazy arguments, as a dispatch below autograd would."""
    return _handler(op)(op, args, kwargs)


def _out(functional, extra, keeps_shape=False):
    """f(..., out=o) records f(...) (through f's own handler) and writes the
    result into o, resizing o first as eager does."""

    def handler(func, args, kwargs):
        out = kwargs.get("out")
        if type(out) is list:  # split_with_sizes_copy(..., out=[...]) (FSDP2's copy-out), unbind_copy
            return _list_out(func, functional, args, kwargs, out)
        if state(out) is None:
            return _eager(func, args, kwargs)
        fkwargs = {k: v for k, v in kwargs.items() if k != "out"}
        if "dtype" in extra:
            fkwargs["dtype"] = out.dtype
        if "device" in extra:
            fkwargs["device"] = LAZY
        result = _call(functional, args, fkwargs)
        if state(result) is None:
            return _eager(func, args, kwargs)
        if result.shape != out.shape:
            if keeps_shape and result.numel() == out.numel():
                result = _functional(aten.reshape.default, (result, list(out.shape)), {})
            elif _value(result).data is not None:
                # f ran eagerly (linalg, fft, ...): so does the out= op, which
                # gives o eager's layout (some resize it column-major).
                return _eager(func, args, kwargs)
            elif not _resize_out(out, result.shape):
                # A storage too small for the result: eager grows it, here o
                # gets one of its own (its aliases do not see the result).
                if result.dtype != out.dtype:
                    node = _cast(_value(result), out.dtype)
                    result = _fresh(node, node.meta)
                _rebind(out, result)
                return out
        _write_as(out, _value(result))
        return out

    return handler


def _list_out(func, functional, args, kwargs, outs):
    """An out= op writing a list of tensors: f(...) recorded, each result
    written into its out tensor (same shapes: eager would resize them)."""
    if not outs or any(state(o) is None for o in outs):
        return _eager(func, args, kwargs)
    results = _call(functional, args, {k: v for k, v in kwargs.items() if k != "out"})
    if (
        type(results) not in (list, tuple)
        or len(results) != len(outs)
        or any(state(r) is None or r.shape != o.shape for r, o in zip(results, outs))
    ):
        return _eager(func, args, kwargs)
    for r, o in zip(results, outs):
        _write_as(o, _value(r))
    return None
