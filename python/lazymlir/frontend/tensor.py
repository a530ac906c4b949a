"""The ``lazy`` device's tensors: LazyTensor, storages and aliasing, values,
views and writes (what computes them: ``barriers``).

A lazy tensor is a plain ``torch.Tensor`` whose TensorImpl is C++
(``csrc/LazyTensor.cpp``, PyTorch's PrivateUse1 key) and holds a
:class:`State`; the C++ kernel registered for every op hands it to
:func:`dispatch`, which records it into the functional trace
(``ir.Node``), with output metadata from running the op on ``meta`` tensors
(``meta``); the handler for each op comes from ``ops`` (installed as a hook, so
this module does not import it).

Aliasing.  Tensors that share memory in eager share a :class:`Storage` here: the
current functional value of the whole base tensor plus a version number.  A view
remembers the chain of view ops from the base, and recomputes its value from the
base when the version moved.  An in-place op computes the new value functionally
and writes it back through the chain with scatter ops (slice_scatter, ...), so
every alias sees the mutation, as in eager, while the graph stays functional.

Barriers (``.item()``, ``.cpu()``, ``print``, ``bool()``, ``mark_step()``;
``barriers``) execute the graph their tensors need; computed nodes become
device data (plain CPU tensors), so nothing is computed twice.
"""

import weakref
from typing import Any, NamedTuple

import torch

from .. import _device
from ..execution import run
from ..lowering.marks import marked
from ..trace.ir import AS_RESHAPE, dense_perm, freeze, Node, QUANTIZED_REPR, untrack
from .fills import filled, FILLS

aten = torch.ops.aten


if torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "Lazy"):
    raise RuntimeError(
        "lazymlir: torch._lazy's TorchScript backend already owns the 'lazy' device "
        "(torch._lazy.ts_backend.init() was called in this process). The two cannot "
        "share it: import lazymlir in a process that does not initialize torch._lazy."
    )

# Meta tensors are interned (one object per size/stride/dtype/offset/view
# bits) and never mutated, so cache keys can hold them by identity. The meta
# of a quantized tensor is of its integer representation: the dtype its lazy
# tensors show is in _dtypes, by id (interned metas live for ever).
_interned = {}
_dtypes = {}


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
        if m.dtype != dtype:  # lazy tensors show the quantized dtype, not its representation
            _dtypes[id(m)] = dtype
        _interned[key] = m
    return m


def _view_bits(m: torch.Tensor) -> int:
    """The conjugate (1) and negative (2) view bits of a complex meta tensor."""
    return (m.is_conj() | m.is_neg() << 1) if m.dtype.is_complex else 0


def _intern_like(m: torch.Tensor) -> torch.Tensor:
    return _intern(m.shape, m.stride(), m.dtype, m.storage_offset(), _view_bits(m))


LAZY = torch.device("lazy", 0)
_CPU = torch.device("cpu")
_META = torch.device("meta")


def device(index: int = 0) -> torch.device:
    """The lazy device, like torch_xla's xla_device()."""
    if index != 0:
        raise ValueError("lazymlir has a single lazy device, index 0")
    return LAZY


class Storage:
    """What aliases share: the value of the base tensor and a version number.

    ``prior``: the value it held before its pending writes (a node with
    data; None for a storage made by them), what a step that fails gives
    back (``barriers``: the barrier that computes them moves it into the
    step's record, so the old value is not kept alive past the step)."""

    __slots__ = ("base", "version", "meta", "step", "prior", "__weakref__")

    def __init__(self, base: Node, meta: torch.Tensor):
        self.base = base
        self.version = 0
        self.meta = meta  # layout of the base tensor, as eager would have it
        self.step = -1  # the mark_step epoch in which it was last registered pending
        self.prior = None
        untrack(self)
        if base.data is None:
            _register(self)


class StorageHandle:
    """What ``untyped_storage()`` gives for a lazy tensor: its storage's
    identity (``data_ptr``: equal for aliases, never 0) and byte size, and
    ``resize_``, which FSDP2 calls to free an unsharded parameter's memory
    between uses (``resize_(0)``) and to get it back before refilling it. A
    lazy storage holds a value, not memory: its size is what is recorded and
    the value is dropped to free it; whatever the tensor holds after it is
    resized back is what is written into it next (undefined in eager too)."""

    __slots__ = ("_s",)

    def __init__(self, storage: Storage):
        self._s = storage

    def data_ptr(self) -> int:
        return id(self._s)

    def nbytes(self) -> int:
        return self.size()

    def size(self) -> int:
        s = self._s
        return 0 if s in _freed else _storage_bytes(s)

    def resize_(self, nbytes: int) -> "StorageHandle":
        s = self._s
        full = _storage_bytes(s)
        if nbytes not in (0, full):
            raise RuntimeError(
                f"lazymlir: a lazy tensor's storage can be resized to 0 bytes (freed) or back "
                f"to its size ({full} bytes), not to {nbytes}"
            )
        if nbytes == 0 and s not in _freed:
            # Freed: the value is dropped, so that nothing keeps its data alive.
            s.prior = None
            s.base = _zeros_node(s.meta.shape, s.meta.dtype, s.meta)
            s.version += 1
            _register(s)
            _freed.add(s)
        elif nbytes:
            _freed.discard(s)
        return self


# Storages resized to 0 bytes (StorageHandle.resize_): FSDP2's alone, kept
# out of Storage so that recording an op pays nothing for them.
_freed: "weakref.WeakSet[Storage]" = weakref.WeakSet()


def _storage_bytes(s: Storage) -> int:
    return s.meta.numel() * s.meta.element_size()


def _zeros_node(size, dtype, meta) -> Node:
    """A value whose contents are undefined (a new empty tensor, a freed
    storage): zeros keep graphs deterministic."""
    return _op_node(aten.zeros.default, (list(size),), {"dtype": dtype, "device": _CPU}, meta)


# Storages whose value may not be computed yet, in the order they became
# pending: what mark_step() executes (C++, FastPath.cpp; the same program gives
# the same graph at every step).
_register = _device.register_pending


def _no_classifier(func):
    raise RuntimeError("lazymlir: no op handlers installed (import lazymlir, not lazymlir.frontend.tensor alone)")


# Picks the handler of an op and caches it with set_handler (ops._handler_for,
# installed by set_classifier: this module does not import the op handlers).
_classifier = _no_classifier
# Handlers by id(op) (hashing an OpOverload runs Python code, id() does not);
# _handler_ops keeps those ops alive so that their ids stay theirs.
_handlers = {}
_handler_ops = {}
_handler_of = _handlers.get


def set_classifier(classify) -> None:
    global _classifier
    _classifier = classify


def handler_for(op):
    """Classify ``op`` now (through the installed classifier, which caches
    its handler)."""
    return _classifier(op)


def set_handler(op, handler) -> None:
    _handlers[id(op)] = handler
    _handler_ops[id(op)] = op


def forget_handler(op=None) -> None:
    """The next dispatch of ``op`` (None: of every op) classifies it again."""
    _device.forget_fast()  # the C++ fast path asks again too
    if op is None:
        _handlers.clear()
    else:
        _handlers.pop(id(op), None)


class State:
    """What a lazy tensor's C++ TensorImpl holds of the trace (``state(t)``):
    the layout ``meta`` (interned), the :class:`Storage` it shares with its
    aliases, the chain of ViewSteps from the storage's base, and its value
    node as of storage version ``version``.  Copied with the TensorImpl
    (detach inside autograd, ``.data``, nn.Parameter, saved outputs)."""

    __slots__ = ("meta", "storage", "chain", "value", "version")

    def __init__(self, meta, storage, chain, value, version):
        self.meta = meta
        self.storage = storage
        self.chain = chain
        self.value = value
        self.version = version
        untrack(self)

    def copy(self) -> "State":
        return State(self.meta, self.storage, self.chain, self.value, self.version)


# state(t): t's State, None for anything that is not a lazy tensor (C++, one call).
state = _device.state


class _LazyTensorType(type):
    def __instancecheck__(cls, obj) -> bool:
        return state(obj) is not None


class LazyTensor(metaclass=_LazyTensorType):
    """``isinstance(t, LazyTensor)``: ``t`` is a tensor on the lazy device.
    Lazy tensors are plain ``torch.Tensor`` objects (a C++ TensorImpl on
    PyTorch's PrivateUse1 key, named "lazy"); this class only answers that."""


def dispatch(func, args, kwargs):
    """Every op on lazy tensors (C++ ``lazyKernel``), as __torch_dispatch__ would get it."""
    handler = _handler_of(id(func))
    if handler is None:
        handler = _classifier(func)
    return handler(func, args, kwargs)


_TENSOR_DATA = torch.Tensor.data
_make = _device.make


def _wrap(meta: torch.Tensor, storage: Storage, chain: tuple, value: Node) -> torch.Tensor:
    return _make(meta, State(meta, storage, chain, value, storage.version), _dtypes.get(id(meta)))


def _fresh(node: Node, meta: torch.Tensor) -> torch.Tensor:
    """A new tensor owning a new storage."""
    return _wrap(meta, Storage(node, meta), (), node)


def _from_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """Device data from a CPU tensor that nobody else will write to."""
    return _fresh(Node.leaf(tensor), _intern(tensor.shape, tensor.stride(), tensor.dtype))


# ----------------------------------------------------------------------------
# Values, views and writes.


def _view_node(step, v: Node) -> Node:
    op, rest, kwargs, meta, sig = step
    node = Node(op, (v,) + rest, kwargs, (v,), sig, meta)
    if _eager_dtypes:
        # A view op found not to lower (view.dtype): its value is computed
        # eagerly, the view stays in the chain (writes and as_strided
        # through it still reach the storage).
        bad = _eager_dtypes.get(op)
        if bad is not None and marked(bad, node.inputs, sig[1:]):
            return _eager_node(node)
    return node


def _value(t: torch.Tensor) -> Node:
    """The current functional value of lazy tensor ``t``."""
    return _state_value(state(t))


def _state_value(st: State) -> Node:
    """The tensor's current value node: its own when no write came since it
    was made, and (a view) the base's computed value is not newer than it;
    else the view of the base's value (a view keeping the expression it was
    written with would recompute it, and everything it came from, in every
    later graph)."""
    s = st.storage
    if st.version == s.version and (not st.chain or st.value.data is not None or s.base.data is None):
        return st.value
    v = s.base
    for step in st.chain:
        v = _view_node(step, v)
    st.value = v
    st.version = s.version
    return v


# Op names by id(op), their ops kept alive in _handler_ops' manner.
_op_names = {}
_named_ops = []


def _oid(op) -> str:
    """The op's name for signatures and keys ("aten.add.Tensor"): hashing the
    OpOverload itself runs Python code, a string hashes once."""
    name = _op_names.get(id(op))
    if name is None:
        name = _op_names[id(op)] = str(op)
        _named_ops.append(op)
    return name


class ViewStep(NamedTuple):
    """One view op of a chain from the base (``State.chain``): the
    view's value is ``op(base value, *rest, **kwargs)``, with metadata ``meta``."""

    op: Any
    rest: tuple
    kwargs: dict
    meta: torch.Tensor
    sig: tuple


def signature(op, args, kwargs) -> tuple:
    """An op's signature in nodes and cache keys: its name and its constants
    (``freeze``: tensors blanked, 1 / 1.0 / True and -0.0 / 0.0 kept apart)."""
    return (_oid(op), freeze(args), freeze(tuple(kwargs.items())))


def _op_node(op, args, kwargs, meta) -> Node:
    """A node on existing values (internal rewrites: scatters, casts)."""
    inputs = tuple(a for a in args if isinstance(a, Node))
    node = Node(op, args, kwargs, inputs, signature(op, args, kwargs), meta)
    bad = _eager_dtypes.get(op)
    if bad is not None and marked(bad, inputs, node.sig[1:]):  # found not to lower
        return _eager_node(node)
    return node


def _eager_node(node: Node) -> Node:
    return Node.leaf(run.eager_value(node))


# What _scatter records.
_SCATTER_OPS = frozenset(
    (
        aten.reshape.default,
        aten.slice_scatter.default,
        aten.select_scatter.default,
        aten.diagonal_scatter.default,
        aten.transpose.int,
        aten.t.default,
        aten.permute.default,
        aten.as_strided_scatter.default,
        aten.view.dtype,
        aten.view_as_real.default,
        aten.view_as_complex.default,
        aten.conj_physical.default,
        aten.neg.default,
    )
)


def _scatter(step, base: Node, src: Node) -> Node:
    """The value of ``base`` after writing ``src`` into its view ``step``."""
    op, rest, kwargs, meta, sig = step
    out_meta = base.meta
    if op is aten.expand.default and meta.numel() != out_meta.numel() or op is aten.unfold.default:
        return _indexed_scatter[0](step, base, src)  # no scatter op of their own, may overlap: view_writes
    if op in _RESHAPE_LIKE:  # the same elements in the same order: a reshape of the value, whatever its strides
        return _op_node(aten.reshape.default, (src, list(base.meta.shape)), {}, out_meta)
    if op is aten.slice.Tensor:
        dim, start, end, stp = (list(rest) + [0, None, None, 1][len(rest) :])[:4]
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
    if op is aten.as_strided.default:  # as_strided_scatter, or (overlapping places) view_writes'
        return _indexed_scatter[0](step, base, src)
    if op is aten.view.dtype:  # the same bytes, all of them
        return _op_node(aten.view.dtype, (src, base.meta.dtype), {}, out_meta)
    if op is aten.view_as_real.default or op is aten.view_as_complex.default:  # each the other's inverse
        inverse = aten.view_as_complex.default if op is aten.view_as_real.default else aten.view_as_real.default
        return _op_node(inverse, (src,), {}, out_meta)
    if op is aten._conj.default:  # the value under it is the conjugate of what is written
        return _op_node(aten.conj_physical.default, (src,), {}, out_meta)
    if op is aten._neg_view.default:
        return _op_node(aten.neg.default, (src,), {}, out_meta)
    raise NotImplementedError(f"lazymlir: writing through a view made by {op} is not supported yet")


# Views that only regroup dimensions: writing back is a reshape to the base shape
# (ir.AS_RESHAPE: the views the FX graph records as reshapes).
_RESHAPE_LIKE = AS_RESHAPE | {
    aten.reshape.default,
    aten._reshape_alias.default,  # reshape's view (handlers._view_step: one with other strides is an as_strided)
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.expand.default,  # adding size-1 dimensions only (a broadcast: view_writes)
}

# [view_writes.indexed_scatter], installed by it (a hook: view_writes imports this module).
_indexed_scatter = []


def _storage_view(t: torch.Tensor, size, stride, offset):
    """(chain, meta) of the view ``as_strided(t, size, stride, offset)``,
    which addresses ``t``'s storage, not ``t``: recorded on the storage's base
    value, which is the storage in order when the base is contiguous, and the
    base permuted to its memory order when it is dense (channels_last); then
    reinterpreted in ``t``'s dtype where it differs (``x.view(torch.int32)``,
    ``view_as_real``: the offset and strides count ``t``'s elements), and
    conjugated or negated as ``t`` is (the bits stay on the view).  None when
    the storage is not dense in some order, or has an offset of its own."""
    st = state(t)
    s = st.storage
    m = s.meta
    if m.storage_offset():
        return None
    chain = ()
    if not m.is_contiguous():
        perm = dense_perm(m.shape, m.stride())
        if perm is None:
            return None
        chain += (_meta_step(aten.permute.default, m, (list(perm),)),)
        m = chain[-1].meta
    mine = st.meta
    if m.dtype != mine.dtype:
        try:
            chain += (_meta_step(aten.view.dtype, m, (mine.dtype,)),)
        except Exception:  # a storage whose last dimension does not split into the dtype
            return None
        m = chain[-1].meta
    try:
        chain += (_meta_step(aten.as_strided.default, m, (list(size), list(stride), offset)),)
    except Exception:
        return None
    bits = _view_bits(mine)
    if bits & 1:
        chain += (_meta_step(aten._conj.default, chain[-1].meta, ()),)
    if bits & 2:
        chain += (_meta_step(aten._neg_view.default, chain[-1].meta, ()),)
    return chain, chain[-1].meta


def _meta_step(op, meta, rest) -> ViewStep:
    return ViewStep(op, rest, {}, _intern_like(op(meta, *rest)), signature(op, rest, {}))


def _contiguous_strides(shape) -> list:
    strides, n = [], 1
    for size in reversed(list(shape)):
        strides.append(n)
        n *= max(size, 1)
    return strides[::-1]


def _rebind(t: torch.Tensor, new: torch.Tensor) -> None:
    """``t`` takes ``new``'s size, strides, storage and value (what resizing
    does in eager: the TensorImpl's metadata changes; autograd state is kept)."""
    _TENSOR_DATA.__set__(t, new)  # swaps the TensorImpl metadata and copies its State


def _resize_out(t: torch.Tensor, shape, strides=None) -> bool:
    """Eager's resize of an ``out=`` tensor ``t`` to another ``shape``
    (``resize_output``; ``strides``: those the op then gives it, linalg's
    column-major ones, default contiguous): ``t`` becomes that view of its
    own storage at its own offset, so every alias of ``t`` sees what is then
    written into it.  False when the storage cannot hold it (eager grows the
    storage; the caller gives ``t`` a storage of its own, which its aliases
    do not see) or is laid out in no order this can address."""
    shape = [int(n) for n in shape]
    contiguous = _contiguous_strides(shape)
    strides = contiguous if strides is None else [int(n) for n in strides]
    numel = 1
    for n in shape:
        numel *= n
    st = state(t)
    mine = st.meta
    if strides == contiguous and numel == t.numel() and mine.is_contiguous() and not _view_bits(mine):
        step = _meta_step(aten.view.default, mine, (shape,))
        chain = st.chain + (step,)
        value = _view_node(step, _state_value(st))
    else:
        s = st.storage
        capacity = s.meta.numel() * s.meta.element_size() // mine.element_size()  # in t's elements
        extent = 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides)) if numel else 0
        if numel == 0 or t.storage_offset() + extent > capacity:
            return False
        found = _storage_view(t, shape, strides, t.storage_offset())
        if found is None:
            return False
        chain, _ = found
        value = s.base
        for step in chain:
            value = _view_node(step, value)
    _rebind(t, _wrap(chain[-1].meta, st.storage, chain, value))
    return True


# Stand-ins for the value under a view and the value written into it in
# _write_recipes' scatter nodes.
WRITE_BASE = Node(None, None, None, (), None, None)
WRITE_SRC = Node(None, None, None, (), None, None)


def _write_recipes(chain: tuple, base_meta: torch.Tensor):
    """For the C++ fast path (csrc/FastPath.cpp, writeValue): how :func:`_write`
    records a write through a view with ``chain`` of a storage whose base
    value has ``base_meta``: (the ViewSteps of the values under the view,
    then per step from the last the (op, args, kwargs, inputs, sig, meta) of
    its scatter node, WRITE_BASE and WRITE_SRC standing for the value under
    it and the value written), or None when Python records it (an op it
    would record is marked to run eagerly: ops.forget_handler drops the
    recipes when one is)."""
    if _eager_dtypes and any(op in _eager_dtypes for op in _SCATTER_OPS.union(s.op for s in chain)):
        return None
    metas = [base_meta] + [step.meta for step in chain[:-1]]
    scatters = []
    try:
        for step, meta in zip(reversed(chain), reversed(metas)):
            WRITE_BASE.meta, WRITE_SRC.meta = meta, step.meta
            n = _scatter(step, WRITE_BASE, WRITE_SRC)
            scatters.append((n.op, n.args, n.kwargs, n.inputs, n.sig, n.meta))
    except NotImplementedError:
        return None
    finally:
        WRITE_BASE.meta = WRITE_SRC.meta = None
    return tuple(chain[:-1]), tuple(scatters)


def _write(t: torch.Tensor, new: Node) -> None:
    """``t`` now holds ``new`` (same shape and dtype): update its storage so that
    every alias sees it."""
    st = state(t)
    s = st.storage
    if s.base.data is None and s.base.op in FILLS:
        filled(s)
    if s.base.data is not None:
        s.prior = s.base  # the value a failed step gives back
    chain = st.chain
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
    st.value = new
    st.version = s.version
    if s.base.data is None:
        _register(s)


# Ops found not to lower (runtime's probe), with the configurations they
# were found with (linalg.op_config: input dtypes and ranks, constants but
# numbers): run eagerly when dispatched with one of those, and when the
# tracer itself emits them (scatters for writes through views); other
# configurations of the op are recorded.
_eager_dtypes = {}
