"""The lazy device's front end: PyTorch's PrivateUse1 key, named "lazy".

Importing this package renames PrivateUse1 to "lazy" (``torch.device("lazy")``,
``.to("lazy")``, ``torch.autocast("lazy")`` and every other device-type-keyed
torch feature then reach it), loads the device's C++ (``lazymlir._device``:
device guard, PrivateUse1 hooks, autocast kernels; it links libtorch and knows
nothing of MLIR) and registers the device module ``torch.lazy``
(:mod:`lazymlir.frontend.device_module`).

PyTorch's backend autoload (the ``torch.backends`` entry point,
:mod:`lazymlir.autoload`) imports this package at the end of
``import torch``, so the device exists before any backward; the tracer and
the compiler load at ``import lazymlir``.
"""

import torch

NAME = "lazy"


def _claim_privateuse1() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME:
        return
    if current != "privateuseone":
        raise RuntimeError(
            f"lazymlir: PyTorch's PrivateUse1 device is already registered as {current!r} in this process; "
            "lazymlir's lazy device needs it (import lazymlir in a process without that backend)"
        )
    torch.utils.rename_privateuse1_backend(NAME)


_claim_privateuse1()

from .. import _device  # noqa: E402  (guard, hooks and autocast kernels register as it loads)
from . import device_module  # noqa: E402

if not hasattr(torch, NAME):
    torch._register_device_module(NAME, device_module)
# torch.accelerator.synchronize(), torch.Stream("lazy").synchronize(): the guard's synchronize waits through Python.
_device.set_synchronize(device_module.synchronize)
# A backward run before the device existed (torch's backend autoload off) left autograd no queue for lazy:0.
_device.add_autograd_device_queue()
