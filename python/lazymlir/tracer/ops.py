"""Op handlers: ``_classify`` picks one per OpOverload (functional ops, views,
in-place and out= variants, foreach, RNG, special cases) and caches it on the
op; ops found not to lower run eagerly for the input dtypes they failed with."""

import math
import operator
import weakref

import torch

from .. import _device, compilation, config
from ..dtypes import SUPPORTED as SUPPORTED_DTYPES
from ..lowering import draws_random
from .tensor import (
    signature,
    ViewStep,
    _CPU,
    _cpu_alias,
    _eager_dtypes,
    _fresh,
    _from_cpu,
    _handler_of,
    _intern,
    _intern_like,
    LAZY,
    _META,
    _oid,
    _op_names,
    _op_node,
    forget_handler,
    _rebind,
    _resize_out,
    set_classifier,
    set_handler,
    state,
    _state_value,
    _storage_view,
    _value,
    _view_node,
    _wrap,
    _write,
    _zeros_node,
)
from .meta import _convert_all, _FAILED, _FLOAT, _infer, _meta_cache, _meta_sig
from .fallback import _eager, _make_eager, _zero_size
from ..trace import BLANK, freeze, LIFTED_OPS, Node

aten = torch.ops.aten

# ----------------------------------------------------------------------------
# Op handlers.  _classify picks one per OpOverload, once.


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


def _records_functional(handler) -> bool:
    """Whether ``handler`` records its op as :func:`_functional` does when the
    fast path takes the call: _functional itself, _to_copy on the lazy device
    (fast_meta leaves transfers out) and the factories (registration: the
    fast path takes the lazy device at index 0 only)."""
    return handler is _functional or handler is _to_copy or getattr(handler, "checks_device_of", None) is _functional


def fast_info(func):
    """For the C++ fast path (csrc/FastPath.cpp): (kind, name, lifted,
    recorded op) when ``func``'s handler is :func:`_functional` (kind 0),
    :func:`_view` (1) or one made by :func:`_inplace` (2; its node records
    the functional variant) or is :func:`_copy_` (3: a lazy source of the
    same shape and dtype), else None (every call of it comes here). name:
    the recorded op's name in signatures; lifted: trace.LIFTED_OPS (its
    float constants are not in the metadata key)."""
    handler = _handler(func)
    if _records_functional(handler):
        recorded, kind = func, 0
    elif handler is _view and func is not aten.as_strided.default and func not in _eager_dtypes:
        recorded, kind = func, 1
    elif getattr(handler, "functional", None) is not None:
        recorded, kind = handler.functional, 2
    elif handler is _copy_:
        recorded, kind = func, 3
    elif handler is _split and func in _SLICED:
        recorded, kind = func, 4
    else:
        return None
    name = _oid(recorded)
    return kind, name, kind in (0, 2, 3) and name in LIFTED_OPS, recorded


def fast_meta(func, args, kwargs):
    """For the C++ fast path: what its handler would record for ``func`` on
    ``args`` and ``kwargs`` (lazy tensors and constants) when that is one
    plain case: the output meta of a functional op (a tuple of them, None
    for an output masked out, when it returns several tensors), the
    ViewStep of a view, the output meta of an in-place op that needs no
    cast; else None (then the call comes here)."""
    handler = _handler(func)
    if handler is _view:
        step = _view_step(func, state(args[0]), tuple(args[1:]), kwargs)
        return None if step is _FAILED else step
    if handler is _split:
        steps = _slices(func, args, kwargs)
        return None if steps is None or aten.slice.Tensor in _eager_dtypes else tuple(steps)
    if handler is _to_copy and (state(args[0]) is None or kwargs.get("device", LAZY).type != "lazy"):
        return None  # a transfer
    meta_args, meta_kwargs, _, _, _, frozen, keys = _convert_all(args, kwargs)
    if _records_functional(handler):
        hit = _infer((_meta_sig((_oid(func),) + frozen), keys), func, meta_args, meta_kwargs)
        ok = (
            hit is not _FAILED
            and hit[1]
            and (
                type(hit[0]) is torch.Tensor
                or type(hit[0]) is tuple
                and all(m is None or type(m) is torch.Tensor for m in hit[0])
            )
        )
    else:
        hit = _inplace_hit(handler.functional, state(args[0]).meta, frozen, keys, meta_args, meta_kwargs)
        ok = hit is not _FAILED and hit[1] and hit[0].dtype == args[0].dtype
    return hit[0] if ok else None


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
                and torch._debug_has_internal_overlap(target) != 1
            )
            hit = (meta, ok)
        _meta_cache[key] = hit
    return hit


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
    return _handler_of(id(op)) or _handler_for(op)


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
    names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
    a = dict(zip(names, args))
    a.update(kwargs)
    rm, rv = a["running_mean"], a["running_var"]
    if rm is None or rv is None:
        return _functional(func, args, kwargs)
    common = (a["input"], a["weight"], a["bias"], rm, rv)
    if not a["training"]:
        outs = _functional(aten._native_batch_norm_legit_no_training.default, common + (a["momentum"], a["eps"]), {})
        if not isinstance(outs, (tuple, list)):
            return outs
        # Eager CPU returns empty saved statistics in evaluation mode (the meta
        # kernel says [C], and so would the graph).
        empty = torch.empty(0, dtype=outs[1].dtype)
        return outs[0], _from_cpu(empty), _from_cpu(empty.clone())
    if state(rm) is None or state(rv) is None:
        return _eager(func, args, kwargs)
    outs = _functional(aten._native_batch_norm_legit_functional.default, common + (True, a["momentum"], a["eps"]), {})
    out, save_mean, save_invstd, new_rm, new_rv = outs
    _write(rm, _value(new_rm))
    _write(rv, _value(new_rv))
    return out, save_mean, save_invstd


def _native_dropout(func, args, kwargs):
    """Training-mode dropout without cutting the trace: only the random mask is
    drawn now, on the CPU generator, exactly as eager CPU dropout draws it
    (empty_like(input).bernoulli_(1 - p).div_(1 - p)), so results and the random
    stream match eager; the multiply is recorded."""
    a = dict(zip(("input", "p", "train"), args))
    a.update(kwargs)
    x, p, train = a["input"], a["p"], a.get("train")
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
    names = ("grad_output", "self", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "indices")
    a = dict(zip(names, args))
    a.update(kwargs)
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
    ops runs them eagerly (runtime.execute's ``condition``)."""
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
    aten.native_dropout.default: _native_dropout,
    aten.set_.source_Tensor: _unsupported,
    aten.threshold_backward.default: _threshold_backward,
}

# Recorded by their own handlers, unless config.force_fallback names them.
_POOLING = {
    aten.max_pool2d_with_indices.default: _max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward.default: _max_pool2d_indices_backward,
}


def _tensor_dtypes(a, out: list) -> list:
    """The dtypes of the tensors in ``a``, in the order _convert_all makes
    them node inputs."""
    if isinstance(a, torch.Tensor):
        out.append(a.dtype)
    elif type(a) is list or type(a) is tuple:
        for x in a:
            _tensor_dtypes(x, out)
    return out


def _handler_for(op):
    """Classify ``op`` (honouring the eager marks of _eager_dtypes and
    config.force_fallback as they are now) and cache the handler on it."""
    handler = _classify(op)
    bad = _eager_dtypes.get(op)
    # Views stay views (tensor._view_node computes a marked one eagerly): run
    # eagerly, their results would alias nothing.
    if bad is not None and handler not in (_view, _split, _alias):
        recorded = handler

        def handler(func, args, kwargs):
            found = _tensor_dtypes(list(args) + list(kwargs.values()), [])
            if tuple(found) in bad:
                return _eager(func, args, kwargs)
            return recorded(func, args, kwargs)

    set_handler(op, handler)
    return handler


def _forget_handlers() -> None:
    """Drop every cached handler: the next dispatch of each op classifies it
    again (after config.force_fallback changed)."""
    forget_handler()


def _run_eagerly_from_now_on(key) -> None:
    op, dtypes = key
    _eager_dtypes.setdefault(op, set()).add(dtypes)
    forget_handler(op)  # rebuilt with the mark at the next dispatch


def _forget_eager(op) -> None:
    """Undo :func:`_run_eagerly_from_now_on` for ``op`` (tests)."""
    _eager_dtypes.pop(op, None)
    forget_handler(op)


compilation.unsupported_op_listeners.append(_run_eagerly_from_now_on)
config.on_change("force_fallback", _forget_handlers)


def _functional_variant(func):
    """add_.Tensor -> add.Tensor; None when there is none."""
    name = func._schema.name.split("::")[1]
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    variant = getattr(packet, func._overloadname, None)
    if variant is None or variant._schema.is_mutable:
        return None
    return variant


# Collectives (torch.distributed's ops, functional or not) and FSDP2's
# copy-in/copy-out ops: run when they are dispatched, in program order, as on
# any device (every rank must issue the same collectives in the same order;
# recorded, they would run when some later barrier needs them).
_COMMUNICATION = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "fsdp", "_dtensor"})


def _classify(func):
    if func in _SPECIAL:
        return _SPECIAL[func]
    schema = func._schema
    name = schema.name.split("::")[-1]
    if schema.name in {s.strip() for s in config.force_fallback.split(",") if s.strip()}:
        return _make_eager(True)
    if schema.name.split("::")[0] in _COMMUNICATION:
        return _make_eager(True)
    if func in _POOLING:
        return _POOLING[func]
    if name.startswith("_foreach_"):
        handler = _foreach(func)
        if handler is not None:
            return handler
    if "sparse" in name:  # their results cannot be device data (trace.device_data raises)
        return _make_eager(True)
    if draws_random(name):  # the CPU generator keeps eager's random stream
        return _make_eager(True, overwrites=name in _OVERWRITES)
    if any(not isinstance(r.type, torch.TensorType) and "Tensor" not in str(r.type) for r in schema.returns):
        return _make_eager(False)  # returns a Python value: a barrier
    if schema.is_mutable:
        first = schema.arguments[0] if schema.arguments else None
        if name.endswith("_") and first is not None and first.alias_info is not None and first.alias_info.is_write:
            if func.is_view or name in (
                "transpose_",
                "t_",
                "squeeze_",
                "unsqueeze_",
                "as_strided_",
                "swapdims_",
                "swapaxes_",
            ):
                packet = getattr(aten, name[:-1], None)
                view = getattr(packet, func._overloadname, None) if packet is not None else None
                if view is None and name == "transpose_":
                    view = aten.transpose.int
                return _inplace_view(view) if view is not None and view.is_view else _unsupported
            variant = _functional_variant(func)
            if variant is not None:
                return _inplace(variant)
        variant = _out_variant(func)
        if variant is not None:
            return _out(*variant, keeps_shape=schema.name in _KEEPS_OUT_SHAPE)
        return _make_eager(True)  # other mutating ops (e.g. batch norm's running stats)
    if func.is_view:
        if len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.TensorType):
            return _view
        return _make_eager(True)
    return _functional


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


set_classifier(_handler_for)
