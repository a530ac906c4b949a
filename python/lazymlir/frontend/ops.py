"""Which handler each op gets: ``_classify`` picks one per OpOverload (the
common ones of ``handlers``: functional ops, views, in-place and out=
variants; the ``special`` ones; eager for RNG, collectives and what does not
lower) and caches it on the op; ops found not to lower run eagerly for the
configuration they failed with (marks.op_config: input dtypes and ranks,
constants). And the C++ fast path's questions about an op (:func:`fast_info`,
:func:`fast_meta`)."""

import torch

from .. import config
from ..execution import entries
from ..lowering.linalg import draws_random
from ..lowering.marks import marked
from .tensor import (
    _eager_dtypes,
    LAZY,
    _oid,
    forget_handler,
    set_classifier,
    set_handler,
    state,
)
from .meta import _convert_all, _FAILED, _infer, _meta_sig
from .fallback import _eager, _make_eager
from ..trace.ir import LIFTED_OPS
from .handlers import (
    _alias,
    _functional,
    _handler,
    _inplace,
    _inplace_hit,
    _inplace_view,
    _KEEPS_OUT_SHAPE,
    _out,
    _out_variant,
    _SLICED,
    _slices,
    _split,
    _view,
    _view_step,
)
from .special import _copy_, _foreach, _OVERWRITES, _POOLING, _SPECIAL, _to_copy, _unsupported

aten = torch.ops.aten


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
    the recorded op's name in signatures; lifted: ir.LIFTED_OPS (its
    float constants are not in the metadata key)."""
    handler = _handler(func)
    handler = getattr(handler, "recorded", handler)  # marked for some configurations: fast_meta refuses those
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
    marks = getattr(handler, "marks", None)
    if marks is not None:  # an op found not to lower for some configurations
        if _marked_call(marks, args, kwargs):
            return None
        handler = handler.recorded
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


def _marked_call(bad, args, kwargs) -> bool:
    """Whether the op whose marks are ``bad`` is marked for this call: the
    configuration of the node its handler would record (_convert_all's
    inputs and constants)."""
    _, _, _, _, inputs, frozen, _ = _convert_all(args, kwargs)
    return marked(bad, inputs, frozen)


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
            if _marked_call(bad, args, kwargs):
                return _eager(func, args, kwargs)
            return recorded(func, args, kwargs)

        handler.recorded, handler.marks = recorded, bad  # the fast path takes its other configurations

    set_handler(op, handler)
    return handler


def _forget_handlers() -> None:
    """Drop every cached handler: the next dispatch of each op classifies it
    again (after config.force_fallback changed)."""
    forget_handler()


def _run_eagerly_from_now_on(key) -> None:
    """``key``: (op, linalg.op_config) from the probe, or (op, input dtypes)
    (torch.compile's regions): that configuration, or every one with those
    dtypes, runs eagerly from now on; the op's others are still recorded."""
    op, config = key
    _eager_dtypes.setdefault(op, set()).add(config)
    forget_handler(op)  # rebuilt with the mark at the next dispatch


def _forget_eager(op) -> None:
    """Undo :func:`_run_eagerly_from_now_on` for ``op`` (tests)."""
    _eager_dtypes.pop(op, None)
    forget_handler(op)


entries.unsupported_op_listeners.append(_run_eagerly_from_now_on)
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
    if "sparse" in name:  # their results cannot be device data (ir.device_data raises)
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


set_classifier(_handler_for)
