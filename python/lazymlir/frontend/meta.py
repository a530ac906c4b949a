"""Argument conversion and meta inference for recorded ops: lazy tensors to
trace nodes and meta tensors, the op's output metadata (cached per signature),
eager CPU's memory formats where meta kernels differ."""

import torch

from ..dtypes import NORMALIZATIONS, SUPPORTED as SUPPORTED_DTYPES
from .tensor import _CPU, _intern_like, _META, state, _state_value
from .barriers import _cpu_alias
from ..trace.ir import BLANK, freeze, LIFTED_OPS, Node

aten = torch.ops.aten

# ----------------------------------------------------------------------------
# Argument conversion and meta inference.
#
# Meta kernels are mostly Python references (torch._refs) and cost 50-200 us per
# call, far more than the rest of recording.  Their result depends only on the op,
# the inputs' metadata and the constants, so it is cached under exactly that.  Meta
# tensors are interned (one object per size/stride/dtype/offset) and never
# mutated, so a key can hold input metas by identity.

_meta_cache = {}
_META_CACHE_LIMIT = 200_000
_FAILED = object()  # the meta kernel raised: the op runs eagerly


def _intern_result(r):
    if isinstance(r, torch.Tensor):
        return _intern_like(r)
    if isinstance(r, (list, tuple)):
        return type(r)(_intern_result(x) for x in r)
    return r


_FLOAT = ("f",)


def _blind(f):
    return _FLOAT if type(f) is tuple and len(f) == 2 and f[0] == "f" else f


def _meta_sig(sig):
    """``sig`` for the meta cache's key: the float constants of ops whose floats
    are lifted into graph inputs (ir._LIFT) never change the result's
    metadata, and optimizers pass new ones every step (Adam's bias
    corrections): keyed by value, the cache would grow by entries every step."""
    if sig[0] not in LIFTED_OPS:
        return sig
    kwargs = sig[2]
    return (sig[0], tuple(map(_blind, sig[1])), tuple([(k, _blind(f)) for k, f in kwargs]) if kwargs else ())


def _infer(key, func, meta_args, meta_kwargs):
    """Cached ``func`` on meta tensors: (interned result, recordable, zero-size),
    or _FAILED.  Recordable: every dtype is supported and no tensor has zero
    elements (compiled code never sees a zero-size tensor; see
    :func:`_zero_size`)."""
    hit = _meta_cache.get(key)
    if hit is not None:
        return hit
    try:
        if func in _MASK_INDEXING and _cpu_mask(meta_args[1] if len(meta_args) > 1 else meta_kwargs["indices"]):
            raise ValueError("a CPU bool mask: its output's shape is its value's")
        if func in _LAYOUT_FROM_CPU and any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in meta_args):
            meta = _intern_result(_cpu_layout(func, meta_args, meta_kwargs))
        else:
            meta = func(*meta_args, **meta_kwargs)
            if func in NORMALIZATIONS:
                meta = _cpu_statistics(meta, meta_args, meta_kwargs)
            meta = _intern_result(meta)
        zero = _has_zero_size(meta) or _has_zero_size(meta_args) or _has_zero_size(list(meta_kwargs.values()))
        hit = (meta, not zero and _all_supported(meta) and _args_supported(meta_args, meta_kwargs), zero)
    except Exception:  # no meta kernel, a data-dependent shape, or a user error
        hit = _FAILED
    if len(_meta_cache) > _META_CACHE_LIMIT:
        _meta_cache.clear()
    _meta_cache[key] = hit
    return hit


# Normalizations (dtypes.NORMALIZATIONS): the meta kernels (torch._refs,
# torch._decomp) keep float32 statistics where the device is not the CPU and
# give group norm's in the input's dtype even when mixed.
_REDUCED = (torch.bfloat16, torch.float16)


def _cpu_statistics(meta, meta_args, meta_kwargs):
    """``meta`` (the op's outputs) with every output after the first in the
    dtype eager's CPU kernel gives it."""
    tensors = [a for a in list(meta_args) + list(meta_kwargs.values()) if isinstance(a, torch.Tensor)]
    if not tensors or tensors[0].dtype not in _REDUCED or not isinstance(meta, (tuple, list)):
        return meta
    mixed = any(t.dtype == torch.float32 for t in tensors[1:])
    dtype = torch.float32 if mixed else tensors[0].dtype
    return type(meta)(
        [meta[0]]
        + [
            m.to(dtype) if isinstance(m, torch.Tensor) and m.is_floating_point() and m.dtype != dtype else m
            for m in meta[1:]
        ]
    )


# x[mask] with a CPU bool mask (CUDA takes CPU indices): the meta kernel
# reads the real mask and gives its nonzero count as a static size, which the
# key (the mask's shape) does not hold, and torch-mlir's lowering of a bool
# index never finished. As with a lazy mask, the op runs eagerly.
_MASK_INDEXING = {aten.index.Tensor, aten._unsafe_index.Tensor}


def _cpu_mask(indices) -> bool:
    return any(
        isinstance(i, torch.Tensor) and i.device.type != "meta" and i.dtype in (torch.bool, torch.uint8)
        for i in indices
    )


# Ops whose meta kernel does not give eager CPU's memory format: convolution's
# leaves its output contiguous (it cannot pick a backend without a device),
# while eager's CPU convolution returns channels_last when its input or weight
# is.  Their layout comes from fake CPU tensors, which pick the backend as eager
# does (on a meta-cache miss only, and only for non-contiguous inputs).
_LAYOUT_FROM_CPU = {aten.convolution.default, aten._convolution.default}
_fake_mode = None


def _cpu_layout(func, meta_args, meta_kwargs):
    from torch._subclasses.fake_tensor import FakeTensorMode

    global _fake_mode
    if _fake_mode is None:
        _fake_mode = FakeTensorMode()

    def fake(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)  # a fake CPU tensor
        if isinstance(a, (list, tuple)):
            return type(a)(fake(x) for x in a)
        return a

    with _fake_mode:
        out = func(*fake(list(meta_args)), **{k: fake(v) for k, v in meta_kwargs.items()})
    return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=_META)


def _has_zero_size(a) -> bool:
    if isinstance(a, torch.Tensor):
        return a.numel() == 0
    if isinstance(a, (list, tuple)):
        return any(_has_zero_size(x) for x in a)
    return False


def _args_supported(meta_args, meta_kwargs) -> bool:
    for a in list(meta_args) + list(meta_kwargs.values()):
        if isinstance(a, torch.Tensor):
            if a.dtype not in SUPPORTED_DTYPES:
                return False
        elif isinstance(a, torch.dtype):
            # e.g. quantize_per_tensor(x, ..., torch.quint8): its meta kernel
            # reports float32, eager gives a quantized tensor
            if a not in SUPPORTED_DTYPES:
                return False
        elif isinstance(a, (list, tuple)) and not _args_supported(a, {}):
            return False
    return True


def _convert(a, inputs: list, keys: list):
    """(meta argument, node argument, frozen constant) for one argument; tensors
    are appended to ``inputs`` (their value) and ``keys`` (their metadata)."""
    st = state(a)
    if st is not None:
        v = _state_value(st)
        inputs.append(v)
        keys.append(id(st.meta))  # interned, alive for ever: the id is the identity
        return st.meta, v, BLANK
    t = type(a)
    if isinstance(a, torch.Tensor):
        # A CPU tensor (a 0-dim scalar, or a copy_ source): snapshot it as device data.
        v = Node.leaf(a.detach().clone())
        inputs.append(v)
        keys.append((a.device, a.shape, a.stride(), a.dtype))
        return a, v, BLANK
    if t is list or t is tuple:
        metas, nodes, frozen = [], [], []
        for x in a:
            m, n, f = _convert(x, inputs, keys)
            metas.append(m)
            nodes.append(n)
            frozen.append(f)
        return t(metas), t(nodes), tuple(frozen)
    if t is torch.device:
        return (_META, _CPU, _CPU) if a.type == "lazy" else (a, a, a)
    return a, a, freeze(a)


def _convert_all(args, kwargs):
    """Everything an op needs: meta args, node args, input values, the node's
    signature and the meta-cache key."""
    inputs = []
    keys = []
    meta_args, node_args, frozen_args = [], [], []
    for a in args:
        m, n, f = _convert(a, inputs, keys)
        meta_args.append(m)
        node_args.append(n)
        frozen_args.append(f)
    if kwargs:
        meta_kwargs, node_kwargs, frozen_kwargs = {}, {}, []
        for k, a in kwargs.items():
            m, n, f = _convert(a, inputs, keys)
            meta_kwargs[k] = m
            node_kwargs[k] = n
            frozen_kwargs.append((k, f))
        frozen = (tuple(frozen_args), tuple(frozen_kwargs))
    else:
        meta_kwargs = node_kwargs = {}
        frozen = (tuple(frozen_args), ())
    return meta_args, meta_kwargs, tuple(node_args), node_kwargs, tuple(inputs), frozen, tuple(keys)


def _eager_arg(a):
    """An argument for running an op eagerly on CPU (lazy tensors: read-only)."""
    if state(a) is not None:
        return _cpu_alias(a)
    t = type(a)
    if t is list or t is tuple:
        return t(_eager_arg(x) for x in a)
    if t is torch.device and a.type == "lazy":
        return _CPU
    return a


def _all_supported(meta) -> bool:
    if isinstance(meta, torch.Tensor):
        return meta.dtype in SUPPORTED_DTYPES
    if isinstance(meta, (list, tuple)):
        return all(m is None or (isinstance(m, torch.Tensor) and m.dtype in SUPPORTED_DTYPES) for m in meta)
    return False  # a Python value: data-dependent, needs a real run
