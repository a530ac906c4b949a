"""lazymlir: a ``lazy`` PyTorch device whose traces are compiled through MLIR.

``import lazymlir`` registers the device; then ``tensor.to("lazy")`` and
``module.to("lazy")`` record aten ops instead of running them, and barriers
(``mark_step()``, ``.item()``, ``.cpu()``, ``print``) compile the trace (or hit
the cache) and run it.

``import torch`` already makes the device (PyTorch's backend autoload:
:mod:`lazymlir.autoload`), so that autograd knows it before any
backward; then this package is imported by that entry point while torch is
being imported and defines nothing, and ``import lazymlir`` runs it in full.
"""

import sys as _sys

__all__ = [
    "LazyTensor",
    "mark_dynamic",
    "mark_static",
    "cache",
    "config",
    "device",
    "empty_cache",
    "kernel_count",
    "mark_step",
    "metrics",
    "profile",
    "sync",
    "wait_device_ops",
]


def _torch_is_being_imported() -> bool:
    return bool(getattr(getattr(_sys.modules.get("torch"), "__spec__", None), "_initializing", False))


if _torch_is_being_imported():
    _autoloading = True  # lazymlir.autoload, as torch's entry point: the device only, then this package is dropped
else:
    from . import frontend  # noqa: F401  (first: PrivateUse1 becomes "lazy" before any lazy device object exists)
    from . import _device  # noqa: F401  (bound here too when the autoload loaded it before this package)
    from . import config, metrics
    from .execution import cache
    from .frontend.tensor import LazyTensor, device
    from .frontend.barriers import empty_cache, kernel_count, mark_step, sync
    from .frontend import ops, registration  # noqa: F401,E402  (op handlers, PrivateUse1 kernels)
    from .execution.run import wait_device_ops
    from .execution.profiler import profile
    from .frontend.marks import mark_dynamic, mark_static
    from .dynamo import skip as _dynamo_skip

    _dynamo_skip.install()  # Dynamo never traces lazymlir's own code (dynamo/skip.py)
