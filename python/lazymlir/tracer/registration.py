"""Registration with PyTorch: factory kernels for the lazy device's dispatch key (PrivateUse1)
(``empty``, ``empty_strided``, ``_copy_from``, ...), and ``Module.to("lazy")``
keeping tied parameters tied."""

import threading

import torch

from .tensor import LazyTensor
from .ops import _copy_, _empty, _empty_strided, _functional

aten = torch.ops.aten

# ----------------------------------------------------------------------------
# Factory functions: with device="lazy" and no tensor argument they reach the
# lazy device's key; everything else (zeros, ones, full, randn, to) is built
# from these and in-place ops in core.


def _copy_from(self, dst, non_blocking=False):
    # Reached with the Python key excluded, e.g. by torch.tensor(data, device="lazy").
    return _copy_(aten.copy_.default, (dst, self), {})


def _one_device(kernel):
    """``kernel`` refusing a lazy device index other than 0 (``lazy:1``), as
    the device guard does: there is one lazy device."""

    def checked(*args, **kwargs):
        device = kwargs.get("device")
        if device is not None and device.index not in (None, 0):
            raise RuntimeError(f"lazymlir has a single lazy device, index 0 (got {device})")
        return kernel(*args, **kwargs)

    return checked


def _factory(op):
    # Recorded as a node (device=cpu in the graph): arange's composite would
    # otherwise resize an empty out= tensor, which a wrapper cannot do.
    def kernel(*args, **kwargs):
        return _functional(op, args, kwargs)

    return _one_device(kernel)


_FACTORIES = ["arange.default", "arange.start", "arange.start_step", "linspace.default", "eye.default",
              "eye.m", "full.default", "zeros.default", "ones.default", "scalar_tensor.default"]

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("_copy_from", _copy_from, "PrivateUse1")
for _name in _FACTORIES:
    _packet, _overload = _name.split(".")
    _lib.impl(_packet if _overload == "default" else _name, _factory(getattr(getattr(aten, _packet), _overload)), "PrivateUse1")
_lib.impl("empty.memory_format", _one_device(_empty), "PrivateUse1")
_lib.impl("empty_strided", _one_device(_empty_strided), "PrivateUse1")


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
        if type(first) is not LazyTensor or not torch.backends.mha._is_fastpath_enabled:
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
