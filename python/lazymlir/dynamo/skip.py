"""Keep Dynamo out of lazymlir's own Python code.

``torch.compile`` over a model whose tensors are on the lazy device cannot
compile it: PyTorch's fake tensors refuse the "lazy" device type
(``torch/_subclasses/meta_utils.py``: "Lazy tensors are not supported", meant
for torch._lazy), so Dynamo gives up on each frame ("meta converter nyi") and
runs it as Python, and the lazy device records its ops as usual. While Dynamo
is active it also tries to compile every Python frame called on the way,
including the lazy device's own op handlers that PyTorch's dispatcher calls
back into; compiling those crashed inside Dynamo (an AssertionError about
no_dispatch() from fakeifying a lazy tensor). With lazymlir's package in
Dynamo's skip list, the model runs correctly, uncompiled by Dynamo, on the
lazy device. ``lazymlir.testing`` stays traceable: its models are user code
(the benchmarks and tests compile them).

Importing torch._dynamo costs about a second, so lazymlir does not import it:
a finder on ``sys.meta_path`` adds lazymlir to the skip list when Dynamo's
``trace_rules`` module is first imported (at once if it already was)."""

import importlib.abc
import importlib.util
import os
import sys
import warnings

_RULES = "torch._dynamo.trace_rules"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRACEABLE = ("testing.py",)


def _skipped() -> list:
    """The package's folders and modules, ``testing.py`` left out, as
    Dynamo's path prefixes."""
    paths = []
    for entry in sorted(os.listdir(_PACKAGE)):
        path = os.path.join(_PACKAGE, entry)
        if os.path.isdir(path) and entry != "__pycache__":
            paths.append(path + os.sep)
        elif entry.endswith(".py") and entry not in _TRACEABLE:
            paths.append(path)
    return paths


def _skip_lazymlir(rules) -> None:
    try:
        rules.SKIP_DIRS.extend(_skipped())
        rules._recompile_re()
    except AttributeError:  # another torch's Dynamo: the known gap comes back, nothing breaks
        warnings.warn(
            "lazymlir: could not add lazymlir to Dynamo's skip list; torch.compile over lazy-device tensors may fail",
            RuntimeWarning,
            stacklevel=2,
        )


class _AfterTraceRules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads Dynamo's trace_rules with the next finders, then skips lazymlir."""

    def find_spec(self, name, path, target=None):
        if name != _RULES:
            return None
        sys.meta_path.remove(self)  # find the real module with the others
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _skip_lazymlir(module)


def install() -> None:
    rules = sys.modules.get(_RULES)
    if rules is not None:
        _skip_lazymlir(rules)
    elif not any(isinstance(f, _AfterTraceRules) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTraceRules())
