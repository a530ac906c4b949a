"""Loaded at interpreter start when this folder is on PYTHONPATH (``make
asan``): ``import lazymlir._native`` then loads the extension named by
``LAZYMLIR_NATIVE`` (the sanitizer build in build-asan/) instead of the
installed one. Nothing is imported early: the native module still loads at
the first compile, as in a normal process."""

import importlib.machinery
import importlib.util
import os
import sys

_PATH = os.environ.get("LAZYMLIR_NATIVE")


class _NativeOverride:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "lazymlir._native" or not _PATH:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, _PATH)
        return importlib.util.spec_from_file_location(name, _PATH, loader=loader)


if _PATH:
    if not os.path.exists(_PATH):
        raise SystemExit(f"LAZYMLIR_NATIVE={_PATH}: no such file")
    sys.meta_path.insert(0, _NativeOverride())
