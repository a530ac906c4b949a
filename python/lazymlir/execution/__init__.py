"""Compiling, caching and running a trace's graphs.

``native``: the boundary to the private native module (MLIR compiler and
runtime); ``compilation``: a graph compiled or loaded from the disk cache,
with its static tier-up and dynamic entries; ``run``: executing traces on
the worker thread, eager reads, waits; ``cache``: the memory and disk caches
(``lazymlir.cache``); ``profiler``: ``lazymlir.profile()``."""
