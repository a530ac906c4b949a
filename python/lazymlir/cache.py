"""The compilation cache, keyed by the trace (see ``trace.collect``).

The key holds op overloads, constants, input shapes and dtypes, which node feeds
which, the outputs and the compiler options; never MLIR text, so a hit does no
MLIR work.  Failed compilations are cached too (as an eager entry), so a graph
that cannot compile is not retried every step.
"""

from typing import Any, Dict, NamedTuple, Optional

_entries: Dict[tuple, Any] = {}
_hits = 0
_misses = 0
_compile_seconds = 0.0


class CacheStats(NamedTuple):
    hits: int
    misses: int
    entries: int
    compile_seconds: float  # torch-mlir lowering + native compilation, all misses


def lookup(key: tuple) -> Optional[Any]:
    global _hits, _misses
    entry = _entries.get(key)
    if entry is None:
        _misses += 1
    else:
        _hits += 1
    return entry


def insert(key: tuple, entry: Any, compile_seconds: float) -> None:
    global _compile_seconds
    _entries[key] = entry
    _compile_seconds += compile_seconds


# Input shapes compiled so far per graph structure (the key with input shapes
# blanked out), to tell a recompilation for new shapes from a new graph.
_shapes_by_structure: Dict[tuple, list] = {}


def shapes_seen(structure: tuple) -> list:
    """The input shapes ``structure`` was compiled for (a live list, to append to)."""
    return _shapes_by_structure.setdefault(structure, [])


def stats() -> CacheStats:
    """Hits, misses, entries and total compile seconds since the last clear()."""
    return CacheStats(_hits, _misses, len(_entries), _compile_seconds)


def clear() -> None:
    """Forget every compiled graph and reset the statistics."""
    global _hits, _misses, _compile_seconds
    _entries.clear()
    _shapes_by_structure.clear()
    _hits = _misses = 0
    _compile_seconds = 0.0
