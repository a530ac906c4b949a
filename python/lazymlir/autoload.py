"""PyTorch's backend autoload of the lazy device: the ``torch.backends`` entry
point (pyproject.toml), which ``import torch`` calls at its end (unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).

:func:`autoload` imports :mod:`lazymlir.frontend`, which makes the device:
PrivateUse1 renamed "lazy", ``lazymlir._device`` loaded (its device guard
registered) and ``torch.lazy``. Autograd's engine sizes its device queues at
its first backward from the device guards registered then, so the device
must exist before any backward (else every lazy backward failed an internal
assert when lazymlir was imported after an eager one). Nothing else loads:
the tracer and the compiler load at ``import lazymlir``.

``lazymlir/__init__.py`` sees ``torch`` being imported and defines nothing;
:func:`autoload` then takes that empty package out of ``sys.modules`` (its
``lazymlir.frontend`` and ``lazymlir._device`` stay), so that a later
``import lazymlir`` runs the package in full.
"""

import sys
import warnings


def autoload() -> None:
    package = sys.modules.get("lazymlir")
    if package is None or not getattr(package, "_autoloading", False):
        return  # `import lazymlir` imported torch: it is under way and makes the device itself
    try:
        from . import frontend  # noqa: F401
    except Exception as e:  # a build under way or removed: `import torch` must not fail for it
        warnings.warn(
            f"lazymlir: the lazy device was not registered at `import torch` ({type(e).__name__}: {e}); "
            "`import lazymlir` will say why again",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        del sys.modules["lazymlir"]  # `import lazymlir` runs the package in full
