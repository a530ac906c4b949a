"""Registration with PyTorch: the C++ kernel on every op of the lazy device's
key (PrivateUse1) handing ops to :func:`tensor.dispatch`, the factory handlers
(``empty``, ``empty_strided``, ``_copy_from``, ...), ``untyped_storage()`` of
lazy tensors, and ``Module.to("lazy")`` keeping tied parameters tied."""

import atexit
import threading

import torch

from .. import _device
from . import attention
from ..trace.ir import BLANK, Node
from .tensor import (
    dispatch,
    LazyTensor,
    State,
    state,
    _state_value,
    Storage,
    StorageHandle,
    WRITE_BASE,
    _write_recipes,
    WRITE_SRC,
)
from .barriers import _to_cpu
from .fills import filled, FILLS
from .handlers import _functional
from .ops import fast_info, fast_meta
from .special import _check_device, _copy_, _empty, _empty_strided, _SPECIAL

aten = torch.ops.aten

# ----------------------------------------------------------------------------
# Factory functions: with device="lazy" and no tensor argument they reach the
# lazy device's key; everything else (zeros, ones, full, randn, to) is built
# from these and in-place ops in core.


def _copy_from(func, args, kwargs):
    # copy_ between devices: torch.tensor(data, device="lazy"), x.to("lazy").
    self, dst = args[0], args[1]
    return _copy_(aten.copy_.default, (dst, self), {})


def _one_device(handler):
    """``handler`` refusing a lazy device index other than 0 (``lazy:1``)."""

    def checked(func, args, kwargs):
        _check_device(kwargs.get("device"))
        return handler(func, args, kwargs)

    checked.checks_device_of = handler  # the fast path records it as handler (ops.fast_info), lazy:1 excluded
    return checked


# Recorded as nodes (device=cpu in the graph): arange's composite would
# otherwise resize an empty out= tensor.
_FACTORIES = [
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.linspace.default,
    aten.eye.default,
    aten.eye.m,
    aten.full.default,
    aten.zeros.default,
    aten.ones.default,
    aten.scalar_tensor.default,
]

_SPECIAL[aten._copy_from.default] = _copy_from
for _op in _FACTORIES:
    _SPECIAL[_op] = _one_device(_functional)
_SPECIAL[aten.empty.memory_format] = _one_device(lambda func, args, kwargs: _empty(*args, **kwargs))
_SPECIAL[aten.empty_strided.default] = _one_device(lambda func, args, kwargs: _empty_strided(*args, **kwargs))

# From here on every op on a lazy tensor reaches the C++ kernel: functional
# ops whose output metadata it has seen are recorded there, the rest come to
# tensor.dispatch.
_device.install(dispatch, State.copy)
_device.install_fast(
    Node, Storage, State, _state_value, fast_info, fast_meta, BLANK, _write_recipes, WRITE_BASE, WRITE_SRC
)
_device.install_fills(FILLS, filled)

_lib = torch.library.Library("aten", "IMPL")


def _tensor_split(self, tensor_indices_or_sections, dim=0):
    # The composite kernel insists on a CPU tensor of split points; a lazy one
    # is read (a barrier, as eager reads it) and the int overloads are used.
    points = tensor_indices_or_sections.cpu()
    if points.dim() > 1 or points.dtype != torch.long:
        return aten.tensor_split.tensor_indices_or_sections(self.cpu(), points, dim)  # eager's error
    if points.dim() == 0:
        return aten.tensor_split.sections(self, int(points), dim)
    return aten.tensor_split.indices(self, points.tolist(), dim)


_lib.impl("tensor_split.tensor_indices_or_sections", _tensor_split, "AutogradPrivateUse1")
# bf16 attention rounded as eager's CPU kernel rounds it, its products on the
# bf16 GEMM (attention.py); anything else decomposes as before.
_lib.impl("scaled_dot_product_attention", attention.scaled_dot_product_attention, "AutogradPrivateUse1")


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


# A lazy tensor has no memory; its untyped_storage() is a StorageHandle
# (aliases share it; FSDP2 frees and restores it with resize_).
_untyped_storage = torch.Tensor.untyped_storage


def _lazy_untyped_storage(self):
    st = state(self)
    return _untyped_storage(self) if st is None else StorageHandle(st.storage)


_lazy_untyped_storage.__doc__ = _untyped_storage.__doc__
torch.Tensor.untyped_storage = _lazy_untyped_storage

# numpy() of a lazy tensor is a barrier that copies its value to the host, as
# .cpu().numpy() does (torch refuses every non-CPU device; np.asarray(t) too).
_numpy = torch.Tensor.numpy


def _lazy_numpy(self, *, force=False):
    if state(self) is None:
        return _numpy(self, force=force)
    if self.requires_grad and not force:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    return _to_cpu(self).numpy()


_lazy_numpy.__doc__ = _numpy.__doc__
torch.Tensor.numpy = _lazy_numpy

# Saved (torch.save, pickle) as the CPU tensor of its value: a checkpoint
# written on the lazy device loads anywhere, lazymlir imported or not.
_reduce_ex = torch.Tensor.__reduce_ex__


def _lazy_reduce_ex(self, proto):
    if state(self) is None:
        return _reduce_ex(self, proto)
    return _reduce_ex(_to_cpu(self), proto)


torch.Tensor.__reduce_ex__ = _lazy_reduce_ex


# PyTorch's "fast path" for nn.TransformerEncoder(Layer) and
# nn.MultiheadAttention in inference calls fused kernels
# (_transformer_encoder_layer_fwd, _native_multi_head_attention) and nested
# tensors on every device named in its list, which includes PrivateUse1 and so
# the lazy device. Neither the fused kernels nor nested tensors are recorded
# (they would run eagerly, and nested tensors cannot be device data), so on
# lazy tensors these modules take their standard path, which compiles, as on
# any device that is not in that list. Outputs at padded positions are then
# computed values, as in training, where eager CPU's nested path gives zeros.
def _standard_path(forward):
    def wrapper(self, *args, **kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        if state(first) is None or not torch.backends.mha._is_fastpath_enabled:
            return forward(self, *args, **kwargs)
        torch.backends.mha._is_fastpath_enabled = False
        try:
            return forward(self, *args, **kwargs)
        finally:
            torch.backends.mha._is_fastpath_enabled = True

    wrapper.__wrapped__ = forward
    wrapper.__doc__ = forward.__doc__
    return wrapper


for _module in (torch.nn.TransformerEncoder, torch.nn.TransformerEncoderLayer, torch.nn.MultiheadAttention):
    _module.forward = _standard_path(_module.forward)


# ----------------------------------------------------------------------------
# Exit: autograd's lazy:0 thread left idle before the interpreter finalizes.

_QUIESCE = []  # what the last backward at exit holds (dropped by finalization, on this thread)


def _quiesce_autograd() -> None:
    """Lazy:0's autograd thread runs a backward's nodes; after it wakes the
    thread that called backward() it still releases the step's graph task,
    and a last reference there to a tensor with a Python object
    (TensorImpl::decref_pyobject, noexcept) or to the copy of the caller's
    contextvars torch 2.13's backward() stashes for the graph task (a core
    dump showed it: ThreadLocalState's destructor) decrefs it, which takes
    the GIL. Once the interpreter is finalizing, a thread that takes the GIL is ended with
    pthread_exit, and inside a noexcept frame that is std::terminate
    ("terminate called without an active exception", issue 47). The device
    thread takes its tasks one at a time, so once a small backward through it
    has returned, it has finished what it was doing before; that backward's
    tensors stay alive here, so what is left of it on the thread touches no
    Python object. Registered at import: atexit runs it after the user's
    handlers and after the last job (run._drain)."""
    if not _device.autograd_device_thread_started():
        return
    try:
        x = torch.zeros((), device="lazy", requires_grad=True)
        y = x * 1.0
        grad = torch.ones((), device="lazy")
        _QUIESCE.extend((x, y, grad))
        # Straight into the engine: torch's backward() stashes a copy of the
        # caller's contextvars in the thread's state for the graph task to
        # carry (and erases it once the backward returns), so the graph task
        # would hold the copy's last reference and decref it on the device
        # thread, racing finalization again (2 aborts in 6 runs of
        # bench_dynamic --smoke before this). This one holds no Python object.
        torch.autograd.Variable._execution_engine.run_backward((y,), (grad,), False, False, (), True, True)
    except Exception:  # an exit never fails for this
        pass


atexit.register(_quiesce_autograd)
