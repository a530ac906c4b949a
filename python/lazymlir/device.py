"""The ``lazy`` device: LazyTensor, op recording, aliasing, barriers.

A LazyTensor is a wrapper subclass (no storage of its own) whose
``__torch_dispatch__`` records every aten op into the functional trace
(``trace.Node``), with output metadata from running the op on ``meta`` tensors.

Aliasing.  Tensors that share memory in eager share a :class:`Storage` here: the
current functional value of the whole base tensor plus a version number.  A view
remembers the chain of view ops from the base, and recomputes its value from the
base when the version moved.  An in-place op computes the new value functionally
and writes it back through the chain with scatter ops (slice_scatter, ...), so
every alias sees the mutation, as in eager, while the graph stays functional.

Barriers (``.item()``, ``.cpu()``, ``print``, ``bool()``, ``mark_step()``) execute
the graph their tensors need; computed nodes become device data (plain CPU
tensors), so nothing is computed twice.
"""

import math
import operator
import threading
import weakref
from typing import List

import torch

from . import config, metrics, runtime
from .dtypes import SUPPORTED as SUPPORTED_DTYPES
from .trace import AS_RESHAPE, BLANK, LIFTED_OPS, QUANTIZED_REPR, Node, dense_perm, freeze

aten = torch.ops.aten

if torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "Lazy"):
    raise RuntimeError(
        "lazymlir: torch._lazy's TorchScript backend already owns the 'lazy' device "
        "(torch._lazy.ts_backend.init() was called in this process). The two cannot "
        "share it: import lazymlir in a process that does not initialize torch._lazy."
    )

LAZY = torch.device("lazy", 0)
_CPU = torch.device("cpu")
_META = torch.device("meta")


def device(index: int = 0) -> torch.device:
    """The lazy device, like torch_xla's xla_device()."""
    if index != 0:
        raise ValueError("lazymlir has a single lazy device, index 0")
    return LAZY


class Storage:
    """What aliases share: the value of the base tensor and a version number."""

    __slots__ = ("base", "version", "meta", "step", "__weakref__")

    def __init__(self, base: Node, meta: torch.Tensor):
        self.base = base
        self.version = 0
        self.meta = meta  # layout of the base tensor, as eager would have it
        self.step = -1  # the mark_step epoch in which it was last registered pending
        if base.data is None:
            _register(self)


# Storages whose value may not be computed yet, in the order they became pending:
# what mark_step() executes.  The order is the program's, so the same program
# gives the same graph (and cache key) at every step.  Weak references without
# callbacks: cheaper than a WeakSet, dead ones are dropped at mark_step.
_pending: List["weakref.ref[Storage]"] = []
_epoch = 0


_prune_at = 4096


def _register(s: Storage) -> None:
    global _prune_at
    if s.step != _epoch:
        s.step = _epoch
        _pending.append(weakref.ref(s))
        if len(_pending) > _prune_at:  # a program that never calls mark_step()
            keep = []
            for r in _pending:
                x = r()
                if x is not None:
                    if x.base.data is None:
                        keep.append(r)
                    else:
                        x.step = -1  # computed: a later write registers it again
            _pending[:] = keep
            _prune_at = max(4096, 2 * len(keep))


class LazyTensor(torch.Tensor):
    """A tensor on the lazy device: metadata is real, values are a trace."""

    # Outputs are made by __torch_dispatch__; the Python-level torch function
    # layer would only add overhead.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # The handler hangs off the OpOverload itself: OpOverload.__hash__ is
        # Python code, an attribute lookup is not.
        handler = getattr(func, "_lz_handler", None)
        if handler is None:
            handler = _handler_for(func)
        return handler(func, args, kwargs or {})

    def __repr__(self, *, tensor_contents=None):
        text = repr(_to_cpu(self).detach())
        suffix = f", device='{LAZY}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return text[:-1] + suffix + ")"

    def tolist(self):
        return _to_cpu(self).tolist()

    def numpy(self, *, force: bool = False):
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return _to_cpu(self).detach().numpy()

    def __reduce_ex__(self, proto):
        # Saved (torch.save, pickle) as the CPU tensor of its value.
        return _to_cpu(self).detach().__reduce_ex__(proto)

    @property
    def data(self):
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, new):
        # `t.data = new` swaps t's TensorImpl metadata in C++; the trace state lives
        # in Python attributes, which must follow (t now aliases new).
        _TENSOR_DATA.__set__(self, new)
        if type(new) is LazyTensor:
            self._lz_meta, self._lz_storage, self._lz_chain = new._lz_meta, new._lz_storage, new._lz_chain
            self._lz_value, self._lz_version = new._lz_value, new._lz_version


_TENSOR_DATA = torch.Tensor.data
_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


def _wrap(meta: torch.Tensor, storage: Storage, chain: tuple, value: Node) -> LazyTensor:
    try:
        size, stride, offset, dtype, bits = meta._lz_layout  # interned metas keep theirs
    except AttributeError:
        size, stride, offset, dtype, bits = meta._lz_layout = (meta.size(), meta.stride(), meta.storage_offset(),
                                                               meta.dtype, _view_bits(meta))
    t = _make_wrapper_subclass(LazyTensor, size, strides=stride, storage_offset=offset, dtype=dtype, device=LAZY)
    if bits:  # a conjugate or negative view (complex): eager fallbacks read the bits
        torch._C._set_conj(t, bool(bits & 1))
        torch._C._set_neg(t, bool(bits & 2))
    t._lz_meta = meta
    t._lz_storage = storage
    t._lz_chain = chain  # ((op, rest_args, kwargs, meta, sig), ...) from the base
    t._lz_value = value
    t._lz_version = storage.version
    return t


def _fresh(node: Node, meta: torch.Tensor) -> LazyTensor:
    """A new tensor owning a new storage."""
    return _wrap(meta, Storage(node, meta), (), node)


def _from_cpu(tensor: torch.Tensor) -> LazyTensor:
    """Device data from a CPU tensor that nobody else will write to."""
    return _fresh(Node.leaf(tensor), _intern(tensor.shape, tensor.stride(), tensor.dtype))


# ----------------------------------------------------------------------------
# Values, views and writes.


def _view_node(step, v: Node) -> Node:
    op, rest, kwargs, meta, sig = step
    return Node(op, (v,) + rest, kwargs, (v,), sig, meta)


def _value(t: LazyTensor) -> Node:
    """The current functional value of ``t``."""
    s = t._lz_storage
    if t._lz_version == s.version:
        return t._lz_value
    v = s.base
    for step in t._lz_chain:
        v = _view_node(step, v)
    t._lz_value = v
    t._lz_version = s.version
    return v


def _oid(op) -> str:
    """The op's name for signatures and keys ("aten.add.Tensor"): hashing the
    OpOverload itself runs Python code, a string hashes once."""
    try:
        return op._lz_id
    except AttributeError:
        op._lz_id = str(op)
        return op._lz_id


def _op_node(op, args, kwargs, meta) -> Node:
    """A node on existing values (internal rewrites: scatters, casts)."""
    inputs = tuple(a for a in args if isinstance(a, Node))
    node = Node(op, args, kwargs, inputs, (_oid(op), freeze(args), freeze(tuple(kwargs.items()))), meta)
    bad = _eager_dtypes.get(op)
    if bad is not None and tuple(i.meta.dtype for i in inputs) in bad:  # found not to lower
        return _eager_node(node)
    return node


def _eager_node(node: Node) -> Node:
    return Node.leaf(runtime.eager_value(node))


def _scatter(step, base: Node, src: Node) -> Node:
    """The value of ``base`` after writing ``src`` into its view ``step``."""
    op, rest, kwargs, meta, sig = step
    out_meta = base.meta
    if op in _RESHAPE_LIKE:
        return _op_node(aten.reshape.default, (src, list(base.meta.shape)), {}, out_meta)
    if op is aten.slice.Tensor:
        dim, start, end, stp = (list(rest) + [0, None, None, 1][len(rest):])[:4]
        return _op_node(aten.slice_scatter.default, (base, src, dim, start, end, stp), {}, out_meta)
    if op is aten.select.int:
        return _op_node(aten.select_scatter.default, (base, src) + rest, {}, out_meta)
    if op is aten.diagonal.default:
        return _op_node(aten.diagonal_scatter.default, (base, src) + rest, {}, out_meta)
    if op is aten.transpose.int:
        return _op_node(aten.transpose.int, (src,) + rest, {}, out_meta)
    if op is aten.t.default:
        return _op_node(aten.t.default, (src,), {}, out_meta)
    if op is aten.permute.default:
        dims = [d % len(rest[0]) for d in rest[0]]
        inverse = [dims.index(i) for i in range(len(dims))]
        return _op_node(aten.permute.default, (src, inverse), {}, out_meta)
    if op is aten.as_strided.default:
        return _op_node(aten.as_strided_scatter.default, (base, src) + rest, {}, out_meta)
    raise NotImplementedError(f"lazymlir: writing through a view made by {op} is not supported yet")


# Views that only regroup dimensions: writing back is a reshape to the base shape
# (trace.AS_RESHAPE: the views the FX graph records as reshapes).
_RESHAPE_LIKE = AS_RESHAPE | {
    aten.reshape.default,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.expand.default,  # only reachable for writes eager allows (size-1 dims)
}


def _write(t: LazyTensor, new: Node) -> None:
    """``t`` now holds ``new`` (same shape and dtype): update its storage so that
    every alias sees it."""
    s = t._lz_storage
    chain = t._lz_chain
    if not chain:
        s.base = new
    else:
        values = [s.base]
        for step in chain[:-1]:
            values.append(_view_node(step, values[-1]))
        cur = new
        for step, base in zip(reversed(chain), reversed(values)):
            cur = _scatter(step, base, cur)
        s.base = cur
    s.version += 1
    t._lz_value = new
    t._lz_version = s.version
    if s.base.data is None:
        _register(s)


# ----------------------------------------------------------------------------
# Barriers.


def _sync(storages) -> None:
    """Compute the pending base values of ``storages`` in one graph."""
    todo = []
    seen = set()
    for s in storages:
        b = s.base
        if b.data is None and id(b) not in seen:
            seen.add(id(b))
            todo.append(b)
    if not todo:
        return
    metrics.counter("Sync")
    results, job, kernels = runtime.execute(todo)
    for node, value in zip(todo, results):
        node.set_data(value, job, kernels)


def _cpu_alias(t: LazyTensor) -> torch.Tensor:
    """A CPU tensor with ``t``'s exact size, stride and offset, sharing device data.
    Read-only: device data is immutable."""
    if t.numel() == 0:  # no data to compute: nothing is synced
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    s = t._lz_storage
    _sync((s,))
    runtime.wait(s.base)
    base = s.base.data
    m = s.meta
    stride = m.stride()
    if base.stride() != stride:
        # Device data is dense in the memory format eager gives the value, which
        # is normally the storage's (channels_last stays NHWC); the view chain
        # needs the storage's exact strides.
        if all(a == b or n == 1 for n, a, b in zip(m.shape, base.stride(), stride)):
            base = base.as_strided(m.shape, stride)  # differs in size-1 dimensions only
        else:
            base = torch.empty_strided(m.shape, stride, dtype=m.dtype).copy_(base)
    for op, rest, kwargs, _, _ in t._lz_chain:
        base = op(base, *rest, **kwargs)
    return base


def _to_cpu(t: LazyTensor) -> torch.Tensor:
    """A private CPU copy of ``t`` (what ``t.cpu()`` returns), autograd-free."""
    return aten._to_copy.default(_cpu_alias(t))


def mark_step() -> None:
    """Cut the trace: start executing everything live tensors still need (on the
    worker: this returns at once on a cache hit), so they hold device data, and
    start the next trace empty."""
    metrics.counter("MarkStep")
    global _epoch
    live = [s for s in map(weakref.ref.__call__, _pending) if s is not None]
    _pending.clear()
    _epoch += 1
    _sync(live)


def kernel_count(tensor: torch.Tensor = None):
    """Kernels (loop nests after fusion and tiling) of a compiled graph: of the
    one that computed ``tensor`` (computing it first if it is pending), or
    without an argument, of the last graph run (compiled or from the cache).
    None when that graph ran eagerly, or the tensor's value did not come from a
    graph (user data, an op run eagerly).  Every compilation also records its
    count as the sample metric ``KernelsPerGraph``."""
    if tensor is None:
        return runtime.last_kernels
    if type(tensor) is not LazyTensor:
        raise TypeError("kernel_count: not a lazy tensor")
    s = tensor._lz_storage
    _sync((s,))
    return s.base.kernels


def sync(tensors: List[torch.Tensor]) -> None:
    """Compute the given lazy tensors now, in one graph."""
    _sync([t._lz_storage for t in tensors if isinstance(t, LazyTensor)])


# ----------------------------------------------------------------------------
# Argument conversion and meta inference.
#
# Meta kernels are mostly Python references (torch._refs) and cost 50-200 us per
# call, far more than the rest of recording.  Their result depends only on the op,
# the inputs' metadata and the constants, so it is cached under exactly that.  Meta
# tensors are interned (one object per size/stride/dtype/offset) and never
# mutated, so a key can hold input metas by identity.

_interned = {}
_meta_cache = {}
_META_CACHE_LIMIT = 200_000
_FAILED = object()  # the meta kernel raised: the op runs eagerly


def _intern(shape, stride, dtype, offset=0, bits=0) -> torch.Tensor:
    key = (tuple(shape), tuple(stride), dtype, offset, bits)
    m = _interned.get(key)
    if m is None:
        m = torch.empty_strided(shape, stride, dtype=QUANTIZED_REPR.get(dtype, dtype), device=_META)
        if offset:
            m = m.as_strided(shape, stride, offset)
        if bits & 1:
            m = m._conj()
        if bits & 2:
            m = m._neg_view()
        if dtype in QUANTIZED_REPR:  # the wrapper shows the quantized dtype
            m._lz_layout = (m.size(), m.stride(), offset, dtype, 0)
        _interned[key] = m
    return m


def _view_bits(m: torch.Tensor) -> int:
    """The conjugate (1) and negative (2) view bits of a complex meta tensor."""
    return (m.is_conj() | m.is_neg() << 1) if m.dtype.is_complex else 0


def _intern_like(m: torch.Tensor) -> torch.Tensor:
    return _intern(m.shape, m.stride(), m.dtype, m.storage_offset(), _view_bits(m))


def _intern_result(r):
    if isinstance(r, torch.Tensor):
        return _intern_like(r)
    if isinstance(r, (list, tuple)):
        return type(r)(_intern_result(x) for x in r)
    return r


_FLOAT = ("f",)


def _meta_sig(sig):
    """``sig`` for the meta cache's key: the float constants of ops whose floats
    are lifted into graph inputs (trace._LIFT) never change the result's
    metadata, and optimizers pass new ones every step (Adam's bias
    corrections): keyed by value, the cache would grow by entries every step."""
    if sig[0] not in LIFTED_OPS:
        return sig

    def blind(f):
        return _FLOAT if type(f) is tuple and len(f) == 2 and f[0] == "f" else f

    return (sig[0], tuple(map(blind, sig[1])), tuple((k, blind(f)) for k, f in sig[2]))


def _infer(key, func, meta_args, meta_kwargs):
    """Cached ``func`` on meta tensors: (interned result, recordable, zero-size),
    or _FAILED.  Recordable: every dtype is supported and no tensor has zero
    elements (compiled code never sees a zero-size tensor; see
    :func:`_zero_size`)."""
    hit = _meta_cache.get(key)
    if hit is not None:
        return hit
    try:
        if func in _LAYOUT_FROM_CPU and any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in meta_args):
            meta = _intern_result(_cpu_layout(func, meta_args, meta_kwargs))
        else:
            meta = _intern_result(func(*meta_args, **meta_kwargs))
        zero = _has_zero_size(meta) or _has_zero_size(meta_args) or _has_zero_size(list(meta_kwargs.values()))
        hit = (meta, not zero and _all_supported(meta) and _args_supported(meta_args, meta_kwargs), zero)
    except Exception:  # no meta kernel, a data-dependent shape, or a user error
        hit = _FAILED
    if len(_meta_cache) > _META_CACHE_LIMIT:
        _meta_cache.clear()
    _meta_cache[key] = hit
    return hit


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
    t = type(a)
    if t is LazyTensor:
        v = a._lz_value if a._lz_version == a._lz_storage.version else _value(a)
        inputs.append(v)
        keys.append(id(a._lz_meta))  # interned, alive for ever: the id is the identity
        return a._lz_meta, v, BLANK
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
    if type(a) is LazyTensor:
        return _cpu_alias(a)
    t = type(a)
    if t is list or t is tuple:
        return t(_eager_arg(x) for x in a)
    if t is torch.device and a.type == "lazy":
        return _CPU
    return a


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


def _all_supported(meta) -> bool:
    if isinstance(meta, torch.Tensor):
        return meta.dtype in SUPPORTED_DTYPES
    if isinstance(meta, (list, tuple)):
        return all(m is None or (isinstance(m, torch.Tensor) and m.dtype in SUPPORTED_DTYPES) for m in meta)
    return False  # a Python value: data-dependent, needs a real run


def _functional(func, args, kwargs):
    if not kwargs:
        # The common case, kept lean: tensors and Python scalars, positionally.
        inputs, keys, frozen, node_args = [], [], [], []
        floats = False
        for a in args:
            t = type(a)
            if t is LazyTensor:
                v = a._lz_value if a._lz_version == a._lz_storage.version else _value(a)
                inputs.append(v)
                node_args.append(v)
                keys.append(id(a._lz_meta))
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
            sig = (_oid(func), tuple(frozen), ())
            hit = _meta_cache.get((_meta_sig(sig) if floats else sig, tuple(keys)))
            if hit is not None and hit is not _FAILED and hit[1]:
                meta = hit[0]
                if type(meta) is torch.Tensor:
                    node = Node(func, tuple(node_args), {}, tuple(inputs), sig, meta)
                    return _wrap(meta, Storage(node, meta), (), node)
    meta_args, meta_kwargs, node_args, node_kwargs, inputs, frozen, keys = _convert_all(args, kwargs)
    sig = (_oid(func),) + frozen
    hit = _infer((_meta_sig(sig), keys), func, meta_args, meta_kwargs)
    if hit is _FAILED or not hit[1]:
        if hit is not _FAILED and hit[2]:
            return _zero_size(func, args, kwargs, hit[0])
        return _eager(func, args, kwargs)
    meta = hit[0]
    return _wrap_outputs(Node(func, node_args, node_kwargs, inputs, sig, meta), meta)


def _zero_size(func, args, kwargs, meta):
    """An op with a zero-size tensor among its inputs or outputs.  When every
    output is empty its value is known (there is none): empty tensors of the
    meta layout, nothing runs.  Otherwise (a reduction or contraction over an
    empty dimension: sum gives zeros, var NaN, mm zeros) the op runs eagerly;
    its empty inputs need no data, so nothing is synced for them."""
    metas = [meta] if isinstance(meta, torch.Tensor) else list(meta) if isinstance(meta, (list, tuple)) else None
    if metas is not None and all(m is None or (isinstance(m, torch.Tensor) and m.numel() == 0) for m in metas):
        outs = [None if m is None else _from_cpu(torch.empty_strided(m.shape, m.stride(), dtype=m.dtype))
                for m in metas]
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
        if type(a) is LazyTensor:
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


def _view(func, args, kwargs):
    self = args[0]
    if type(self) is not LazyTensor:
        return _functional(func, args, kwargs)
    if func is aten.as_strided.default:
        return _as_strided(func, args, kwargs)
    rest = tuple(args[1:])
    sig = (_oid(func), freeze(rest), freeze(tuple(kwargs.items())))
    key = (sig, id(self._lz_meta))
    step = _meta_cache.get(key)
    if step is None:
        try:
            meta = _intern_like(func(self._lz_meta, *rest, **kwargs))
            step = (func, rest, kwargs, meta, sig)
        except Exception:
            step = _FAILED
        _meta_cache[key] = step
    if step is _FAILED:
        return _eager(func, args, kwargs)
    node = _view_node(step, _value(self))
    return _wrap(step[3], self._lz_storage, self._lz_chain + (step,), node)


def _as_strided(func, args, kwargs):
    """as_strided addresses the storage, not its input: record it on the base's
    value, which is the storage in order when the base is contiguous, and
    the base permuted to its memory order when it is dense (channels_last)."""
    self = args[0]
    s = self._lz_storage
    chain = ()
    if not s.meta.is_contiguous():
        perm = dense_perm(s.meta.shape, s.meta.stride())
        if perm is None or s.meta.storage_offset():
            return _eager(func, args, kwargs)
        pmeta = _intern_like(aten.permute.default(s.meta, list(perm)))
        chain = ((aten.permute.default, (list(perm),), {}, pmeta, (_oid(aten.permute.default), freeze((perm,)), ())),)
    rest = tuple(args[1:])
    if (rest[2] if len(rest) > 2 else kwargs.get("storage_offset")) is None:
        # No storage_offset: as_strided keeps the input's own, which recorded
        # on the base would read from the storage's start.
        kwargs = {k: v for k, v in kwargs.items() if k != "storage_offset"}
        rest = (rest[0], rest[1], self.storage_offset())
    meta = _intern_like(func(self._lz_meta, *rest, **kwargs))
    chain += ((func, rest, kwargs, meta, (_oid(func), freeze(rest), freeze(tuple(kwargs.items())))),)
    value = s.base
    for step in chain:
        value = _view_node(step, value)
    return _wrap(meta, s, chain, value)


def _inplace_view(view):
    """x.transpose_(...) and friends change x's own sizes and strides: x becomes
    the view ``view(x, ...)`` (same storage), as ``x.data = view`` would make it."""

    def handler(func, args, kwargs):
        self = args[0]
        if type(self) is not LazyTensor:
            return _eager(func, args, kwargs)
        v = _view(view, args, kwargs)
        if type(v) is not LazyTensor or v._lz_storage is not self._lz_storage:
            raise NotImplementedError(f"lazymlir: {func} on this tensor is not supported yet")
        _TENSOR_DATA.__set__(self, v)  # swaps the TensorImpl metadata, keeps autograd state
        self._lz_meta, self._lz_chain = v._lz_meta, v._lz_chain
        self._lz_value, self._lz_version = v._lz_value, v._lz_version
        return self

    return handler


def _alias(func, args, kwargs):
    """detach/alias: same storage, same value, new tensor (autograd sees a new one)."""
    self = args[0]
    return _wrap(self._lz_meta, self._lz_storage, self._lz_chain, _value(self))


def _split(func, args, kwargs):
    """split/unbind as slices/selects: single-output views the write path knows."""
    self = args[0]
    if type(self) is not LazyTensor:
        return _eager(func, args, kwargs)
    try:
        metas = func(self._lz_meta, *args[1:], **kwargs)
    except Exception:
        return _eager(func, args, kwargs)
    if func is aten.unbind.int:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        return tuple(_view(aten.select.int, (self, dim, i), {}) for i in range(len(metas)))
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    dim %= max(self.dim(), 1)
    outs, start = [], 0
    for m in metas:
        n = m.shape[dim]
        outs.append(_view(aten.slice.Tensor, (self, dim, start, start + n, 1), {}))
        start += n
    return outs


def _cast(node: Node, dtype) -> Node:
    args, kwargs = (node,), {"dtype": dtype}
    sig = (_oid(aten._to_copy.default), (BLANK,), (("dtype", dtype),))
    meta = _infer((sig, (id(node.meta), node.meta)), aten._to_copy.default, (node.meta,), kwargs)[0]
    return Node(aten._to_copy.default, args, kwargs, (node,), sig, meta)


def _inplace(functional):
    """x.op_(...) records op(x, ...) and writes the result back into x's storage."""

    def handler(func, args, kwargs):
        self = args[0]
        if type(self) is not LazyTensor:
            return _eager(func, args, kwargs)
        meta_args, meta_kwargs, node_args, node_kwargs, inputs, frozen, keys = _convert_all(args, kwargs)
        sig = (_oid(functional),) + frozen
        msig = _meta_sig(sig)
        key = ("inplace", msig, keys)
        hit = _meta_cache.get(key)
        if hit is None:
            hit = _infer((msig, keys), functional, meta_args, meta_kwargs)
            if hit is not _FAILED:
                meta, ok, _ = hit
                target = self._lz_meta
                ok = ok and (
                    isinstance(meta, torch.Tensor)
                    and meta.shape == target.shape
                    and (meta.dtype == target.dtype or torch.can_cast(meta.dtype, target.dtype))
                    and torch._debug_has_internal_overlap(target) != 1
                )
                hit = (meta, ok)
            _meta_cache[key] = hit
        if hit is _FAILED or not hit[1]:
            return _eager(func, args, kwargs)  # eager raises its own error, or copes
        node = Node(functional, node_args, node_kwargs, inputs, sig, hit[0])
        if node.meta.dtype != self.dtype:
            node = _cast(node, self.dtype)
        _write(self, node)
        return self

    return handler


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
        extra = args[len(base):]
        if all(a.kwarg_only and a.has_default_value() for a in extra):
            return f, {a.name for a in extra}
    return None


def _out(functional, extra):
    """f(..., out=o) records f(...) and writes the result into o."""

    def handler(func, args, kwargs):
        out = kwargs.get("out")
        if type(out) is not LazyTensor:
            return _eager(func, args, kwargs)
        fkwargs = {k: v for k, v in kwargs.items() if k != "out"}
        if "dtype" in extra:
            fkwargs["dtype"] = out.dtype
        if "device" in extra:
            fkwargs["device"] = LAZY
        result = _functional(functional, args, fkwargs)
        if type(result) is not LazyTensor:
            return _eager(func, args, kwargs)
        if result.shape != out.shape:  # eager resizes out= tensors
            if result.dtype != out.dtype:
                node = _cast(_value(result), out.dtype)
                result = _fresh(node, node.meta)
            _rebind(out, result)
            return out
        node = _value(result)
        if node.meta.dtype != out.dtype:
            node = _cast(node, out.dtype)
        _write(out, node)
        return out

    return handler


def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if type(dst) is not LazyTensor:  # lazy -> cpu (or another device)
        return dst.copy_(_cpu_alias(src), *args[2:])
    if type(src) is LazyTensor:
        v = _value(src)
    else:
        v = Node.leaf(src.detach().to(_CPU, copy=True))
    if dst.dtype not in SUPPORTED_DTYPES or v.meta.dtype not in SUPPORTED_DTYPES:
        if v.meta.shape == dst.shape and v.meta.dtype == dst.dtype:
            _write(dst, v)  # a plain move needs no compute
            return dst
        return _eager(func, args, kwargs)
    if tuple(v.meta.shape) != tuple(dst.shape):
        meta = _intern_like(aten.copy.default(dst._lz_meta, v.meta))
        v = _op_node(aten.copy.default, (_value(dst), v), {}, meta)
    elif v.meta.dtype != dst.dtype:
        v = _cast(v, dst.dtype)
    _write(dst, v)
    return dst


def _to_copy(func, args, kwargs):
    target = kwargs.get("device")
    if target is not None and target.type != "lazy":
        cpu_kwargs = dict(kwargs)
        cpu_kwargs["device"] = _CPU
        out = aten._to_copy.default(_cpu_alias(args[0]), **cpu_kwargs)
        return out if target.type == "cpu" else out.to(target)
    return _functional(func, args, kwargs)


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
    if type(rm) is not LazyTensor or type(rv) is not LazyTensor:
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
    if type(x) is not LazyTensor or train is False or not 0.0 < p < 1.0 or x.numel() == 0:
        return _functional(func, args, kwargs)
    # empty_like: eager draws the mask in the memory order of the input (NHWC too)
    noise = torch.empty_like(x._lz_meta, device=_CPU).bernoulli_(1 - p).div_(1 - p)
    out = _functional(aten.mul.Tensor, (x, _from_cpu(noise)), {})
    return out, _from_cpu(noise != 0)


def _foreach(func):
    """_foreach_<op>[_] as a loop of per-tensor ops, like eager's slow path
    (foreach_tensor_*_slow): each element is recorded by its own handler, so
    optimizer steps with foreach=True trace into the same graph as a for-loop.
    ``None`` when there is no per-tensor op to map to (the op then runs eagerly)."""
    schema = func._schema
    name = schema.name.split("::")[1][len("_foreach_"):]
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
    kw_only = next([a.name for a in s.arguments if a.kwarg_only] for s in per_schemas
                   if sum(not a.kwarg_only for a in s.arguments) == n_pos)
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
            r = per(*pos, **kw)
            if writes_back:
                args[0][i].copy_(r)
            results.append(r)
        return None if inplace else results

    return handler


def _threshold_backward(func, args, kwargs):
    """Eager CPU promotes mixed dtypes (an int64 gradient and a float32 input
    give float32); the meta kernel, and the graph, keep the gradient's."""
    grad, x = args[0], args[1]
    if isinstance(grad, torch.Tensor) and isinstance(x, torch.Tensor) and grad.dtype != x.dtype:
        return _eager(func, args, kwargs)
    return _functional(func, args, kwargs)


def _scalar(func, args, kwargs):
    """.item(), bool(): a barrier that returns a Python value."""
    return func(_cpu_alias(args[0]))


def _rebind(t: LazyTensor, new: LazyTensor) -> None:
    """``t`` takes ``new``'s size, strides and value, with a storage of its own
    (what resizing to a new size does in eager; autograd state is kept)."""
    _TENSOR_DATA.__set__(t, new)  # swaps the TensorImpl metadata
    t._lz_meta, t._lz_storage, t._lz_chain = new._lz_meta, new._lz_storage, new._lz_chain
    t._lz_value, t._lz_version = new._lz_value, new._lz_version


def _resize_(func, args, kwargs):
    """Eager keeps a resized tensor's elements in storage order and leaves the
    ones past its old size uninitialized (here: zeros).  Aliases of the old
    storage do not follow a resize to a new size."""
    self, size = args[0], list(args[1])
    if tuple(self.shape) == tuple(size):
        return self
    if type(self) is not LazyTensor or not self.is_contiguous() or self.storage_offset():
        raise NotImplementedError("lazymlir: resizing a lazy view or a non-contiguous lazy tensor is not supported")
    n, old = math.prod(size), self.numel()
    flat = _functional(aten.reshape.default, (self, [old]), {})
    if n <= old:
        flat = _functional(aten.slice.Tensor, (flat, 0, 0, n), {})
    else:
        flat = _functional(aten.cat.default, ([flat, _empty([n - old], dtype=self.dtype)],), {})
    _rebind(self, _functional(aten.reshape.default, (flat, size), {}))
    return self


def _unsupported(func, args, kwargs):
    raise NotImplementedError(f"lazymlir: {func} (changes a tensor's metadata in place) is not supported yet")


_RNG_NAMES = ("rand", "normal", "bernoulli", "uniform", "dropout", "multinomial", "exponential",
              "geometric", "cauchy", "log_normal", "random", "poisson")

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
    aten.split_with_sizes.default: _split,
    aten.unbind.int: _split,
    aten.resize_.default: _resize_,
    aten.native_batch_norm.default: _batch_norm,
    aten.native_dropout.default: _native_dropout,
    aten.set_.source_Tensor: _unsupported,
    aten.threshold_backward.default: _threshold_backward,
}

# Ops found not to lower (runtime's probe), with the input dtypes they were
# found with: run eagerly when dispatched with those, and when the tracer
# itself emits them (scatters for writes through views).
_eager_dtypes = {}


def _tensor_dtypes(a, out: list) -> list:
    """The dtypes of the tensors in ``a``, in the order _convert_all makes
    them node inputs."""
    if isinstance(a, torch.Tensor):
        out.append(a.dtype)
    elif type(a) is list or type(a) is tuple:
        for x in a:
            _tensor_dtypes(x, out)
    return out


# The ops whose handler is cached on them (``op._lz_handler``).
_cached_handlers = set()


def _handler_for(op):
    """Classify ``op`` (honouring the eager marks of _eager_dtypes and
    config.force_fallback as they are now) and cache the handler on it."""
    handler = _classify(op)
    bad = _eager_dtypes.get(op)
    if bad is not None:
        recorded = handler

        def handler(func, args, kwargs):
            found = _tensor_dtypes(list(args) + list(kwargs.values()), [])
            if tuple(found) in bad:
                return _eager(func, args, kwargs)
            return recorded(func, args, kwargs)

    op._lz_handler = handler
    _cached_handlers.add(op)
    return handler


def _forget_handlers() -> None:
    """Drop every cached handler: the next dispatch of each op classifies it
    again (after config.force_fallback changed)."""
    for op in _cached_handlers:
        if hasattr(op, "_lz_handler"):
            del op._lz_handler
    _cached_handlers.clear()


def _run_eagerly_from_now_on(key) -> None:
    op, dtypes = key
    _eager_dtypes.setdefault(op, set()).add(dtypes)
    if hasattr(op, "_lz_handler"):
        del op._lz_handler  # rebuilt with the mark at the next dispatch


def _forget_eager(op) -> None:
    """Undo :func:`_run_eagerly_from_now_on` for ``op`` (tests)."""
    _eager_dtypes.pop(op, None)
    if hasattr(op, "_lz_handler"):
        del op._lz_handler


runtime.unsupported_op_listeners.append(_run_eagerly_from_now_on)
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


def _classify(func):
    if func in _SPECIAL:
        return _SPECIAL[func]
    schema = func._schema
    name = schema.name.split("::")[-1]
    if schema.name in {s.strip() for s in config.force_fallback.split(",") if s.strip()}:
        return _make_eager(True)
    if name.startswith("_foreach_"):
        handler = _foreach(func)
        if handler is not None:
            return handler
    if "sparse" in name:  # their results cannot be device data (trace.device_data raises)
        return _make_eager(True)
    if any(r in name for r in _RNG_NAMES) and "backward" not in name:  # the CPU generator keeps eager's random stream
        return _make_eager(True, overwrites=name in _OVERWRITES)
    if any(not isinstance(r.type, torch.TensorType) and "Tensor" not in str(r.type) for r in schema.returns):
        return _make_eager(False)  # returns a Python value: a barrier
    if schema.is_mutable:
        first = schema.arguments[0] if schema.arguments else None
        if name.endswith("_") and first is not None and first.alias_info is not None and first.alias_info.is_write:
            if func.is_view or name in ("transpose_", "t_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_", "swapaxes_"):
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
            return _out(*variant)
        return _make_eager(True)  # other mutating ops (e.g. batch norm's running stats)
    if func.is_view:
        if len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.TensorType):
            return _view
        return _make_eager(True)
    return _functional


# ----------------------------------------------------------------------------
# Factory functions: with device="lazy" and no tensor argument they reach the
# Lazy dispatch key; everything else (zeros, ones, full, randn, to) is built
# from these and in-place ops in core.


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    meta = _intern_like(torch.empty(size, dtype=dtype, device=_META, memory_format=memory_format or torch.contiguous_format))
    if meta.numel() == 0:  # no value to compute
        return _from_cpu(torch.empty_strided(meta.shape, meta.stride(), dtype=dtype))
    # The contents are undefined; zeros keep graphs deterministic.
    node = _op_node(aten.zeros.default, (list(size),), {"dtype": dtype, "device": _CPU}, meta)
    return _fresh(node, meta)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    meta = _intern(size, stride, dtype)
    if meta.numel() == 0:  # no value to compute
        return _from_cpu(torch.empty_strided(size, stride, dtype=dtype))
    node = _op_node(aten.zeros.default, (list(size),), {"dtype": dtype, "device": _CPU}, meta)
    return _fresh(node, meta)


def _copy_from(self, dst, non_blocking=False):
    # Reached with the Python key excluded, e.g. by torch.tensor(data, device="lazy").
    return _copy_(aten.copy_.default, (dst, self), {})


def _factory(op):
    # Recorded as a node (device=cpu in the graph): arange's composite would
    # otherwise resize an empty out= tensor, which a wrapper cannot do.
    def kernel(*args, **kwargs):
        return _functional(op, args, kwargs)

    return kernel


_FACTORIES = ["arange.default", "arange.start", "arange.start_step", "linspace.default", "eye.default",
              "eye.m", "full.default", "zeros.default", "ones.default", "scalar_tensor.default"]

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("_copy_from", _copy_from, "Lazy")
for _name in _FACTORIES:
    _packet, _overload = _name.split(".")
    _lib.impl(_packet if _overload == "default" else _name, _factory(getattr(getattr(aten, _packet), _overload)), "Lazy")
_lib.impl("empty.memory_format", _empty, "Lazy")
_lib.impl("empty_strided", _empty_strided, "Lazy")


def _tensor_split(self, tensor_indices_or_sections, dim=0):
    # The composite kernel insists on a CPU tensor of split points; a lazy one
    # is read (a barrier, as eager reads it) and the int overloads are used.
    points = tensor_indices_or_sections.cpu()
    if points.dim() > 1 or points.dtype != torch.long:
        return aten.tensor_split.tensor_indices_or_sections(self.cpu(), points, dim)  # eager's error
    if points.dim() == 0:
        return aten.tensor_split.sections(self, int(points), dim)
    return aten.tensor_split.indices(self, points.tolist(), dim)


_lib.impl("tensor_split.tensor_indices_or_sections", _tensor_split, "AutogradLazy")


# Module.to("lazy") and tied parameters.  For a device whose tensors share the
# CPU tensor's TensorImpl type, Module._apply moves a parameter in place
# (param.data = moved), so a Parameter shared by two modules (GPT-2's token
# embedding and LM head, any tied embedding) stays one Parameter.  A lazy
# tensor is a Python wrapper subclass: _apply makes a new Parameter for every
# place the old one is registered, and the tie silently breaks (each copy
# gets only its own module's gradient); so does .to("cpu") back.  The
# outermost _apply of a module tree re-ties them: every place that held one
# Parameter gets the first Parameter made from it.
_module_apply = torch.nn.Module._apply
_applying = threading.local()


def _apply_keeping_ties(self, fn, recurse=True):
    if getattr(_applying, "active", False) or not recurse:
        return _module_apply(self, fn, recurse)
    places = {}
    for module in self.modules():
        for kind in ("_parameters", "_buffers"):
            for name, t in getattr(module, kind).items():
                if t is not None:
                    places.setdefault(id(t), [isinstance(t, LazyTensor)]).append((module, kind, name))
    _applying.active = True
    try:
        result = _module_apply(self, fn, recurse)
    finally:
        _applying.active = False
    for was_lazy, *shared in places.values():
        if len(shared) < 2:
            continue
        module, kind, name = shared[0]
        first = getattr(module, kind)[name]
        if was_lazy or isinstance(first, LazyTensor):  # to or from the lazy device
            for module, kind, name in shared[1:]:
                getattr(module, kind)[name] = first
    return result


torch.nn.Module._apply = _apply_keeping_ties
