"""lazymlir: a ``lazy`` PyTorch device whose traces are compiled through MLIR.

``import lazymlir`` registers the device; then ``tensor.to("lazy")`` and
``module.to("lazy")`` record aten ops instead of running them, and barriers
(``mark_step()``, ``.item()``, ``.cpu()``, ``print``) compile the trace (or hit
the cache) and run it.
"""

from . import tracer  # noqa: F401  (first: PrivateUse1 becomes "lazy" before any lazy device object exists)
from . import cache, config, metrics
from .tracer.tensor import LazyTensor, device, kernel_count, mark_step, sync
from .tracer import ops, registration  # noqa: F401,E402  (op handlers, PrivateUse1 kernels)
from .runtime import empty_cache, wait_device_ops
from .profiler import profile
from .tracer.marks import mark_dynamic, mark_static

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
