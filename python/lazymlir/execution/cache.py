"""The compilation caches.

In memory, keyed by the trace (see ``ir.collect``): the key holds op
overloads, constants, input shapes and dtypes, which node feeds which, the
outputs and the compiler options; never MLIR text, so a hit does no MLIR work.
Failed compilations are cached too (as an eager entry), so a graph that cannot
compile is not retried every step.

On disk (``config.cache_dir``), across processes: the native compiler keeps
compiled graphs and kernels as object code, keyed by their IR and what else
changes the code (lazymlir/native.py); here, a record per trace maps the
trace to its compiled graph, so that a second process skips torch-mlir's
lowering too. A record is written only for a trace whose key is made of
values with an exact ``repr`` (numbers, strings, dtypes, shapes, ...), and is
keyed by that repr together with the digest of this package's Python sources,
the torch and torch-mlir versions and the native build.
"""

import hashlib
import json
import os
import types
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch

from ..trace.ir import BLANK

_entries: Dict[tuple, Any] = {}
_hits = 0
_misses = 0
_compile_seconds = 0.0
_disk_hits = 0
_disk_misses = 0


class CacheStats(NamedTuple):
    hits: int
    misses: int
    entries: int
    compile_seconds: float  # torch-mlir lowering + native compilation, all misses
    disk_hits: int = 0  # in-memory misses served by the disk cache (nothing compiled)
    disk_misses: int = 0  # in-memory misses compiled (with the disk cache on)


def lookup(key: tuple) -> Optional[Any]:
    global _hits, _misses
    entry = _entries.get(key)
    if entry is None:
        _misses += 1
    else:
        _hits += 1
    return entry


def count_hit() -> None:
    """A hit that did not go through :func:`lookup` (the device's replay of
    a step, run.replay)."""
    global _hits
    _hits += 1


def insert(key: tuple, entry: Any, compile_seconds: float) -> None:
    global _compile_seconds
    if key in _entries:
        _forget()  # what the replay runs for this key changes
    _entries[key] = entry
    _compile_seconds += compile_seconds


def remove(key: tuple) -> None:
    """Forget one entry (if there)."""
    if _entries.pop(key, None) is not None:
        _forget()


def drop(kind: str) -> None:
    """Forget the entries whose key starts with ``kind`` (torch.compile's
    regions at exit: their executables go before the native runtime)."""
    for key in [k for k in _entries if k and k[0] == kind]:
        del _entries[key]
    _forget()


def note_disk(hit: bool) -> None:
    global _disk_hits, _disk_misses
    if hit:
        _disk_hits += 1
    else:
        _disk_misses += 1


# Input shapes compiled so far per graph structure (the key with input shapes
# blanked out), to tell a recompilation for new shapes from a new graph.
_shapes_by_structure: Dict[tuple, list] = {}


def shapes_seen(structure: tuple) -> list:
    """The input shapes ``structure`` was compiled for (a live list, to append to)."""
    return _shapes_by_structure.setdefault(structure, [])


def stats() -> CacheStats:
    """Hits, misses, entries and total compile seconds since the last clear();
    disk hits and misses: graphs not in memory found in (or compiled and
    written to) the disk cache."""
    return CacheStats(_hits, _misses, len(_entries), _compile_seconds, _disk_hits, _disk_misses)


# What the stages above this module (which import it) do when the cache is
# cleared or background compiles are waited for: compilation registers its
# static tier-up and the native compiler's tiered recompiles, dynamic its
# templates.
_clear_hooks: List[Callable[[], None]] = []
_wait_hooks: List[Callable[[], None]] = []
_forget_hooks: List[Callable[[], None]] = []


def on_clear(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever :func:`clear` runs (before the entries go)."""
    _clear_hooks.append(hook)


def on_forget(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever an entry is dropped or replaced (:func:`clear`,
    :func:`drop`, :func:`insert` over an existing key): the device's replay
    forgets the graphs it runs."""
    _forget_hooks.append(hook)


def _forget() -> None:
    for hook in _forget_hooks:
        hook()


def on_wait_background_compiles(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever :func:`wait_background_compiles` runs, in order."""
    _wait_hooks.append(hook)


def clear() -> None:
    """Forget every compiled graph (in memory; the disk cache stays) and reset
    the statistics."""
    global _hits, _misses, _compile_seconds, _disk_hits, _disk_misses
    for hook in _clear_hooks:
        hook()
    _forget()
    _entries.clear()
    _shapes_by_structure.clear()
    _hits = _misses = _disk_hits = _disk_misses = 0
    _compile_seconds = 0.0


def wait_background_compiles() -> None:
    """Block until the kernels of every hot graph have been recompiled at full
    effort (tiered compilation, ``config.tiered``) and the graphs run that
    code, and the static graphs of sizes that kept coming back to a dynamic
    graph are compiled: for benchmarks that measure steady-state speed right after the
    first steps."""
    for hook in _wait_hooks:
        hook()


# ----------------------------------------------------------------------------
# Records: trace -> compiled graph, on disk.


class _Unstable(Exception):
    pass


_EXACT_REPR = frozenset(
    {int, float, str, bool, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format}
)


def _stable_repr(key: tuple) -> Optional[str]:
    """``repr(key)`` when every leaf of it has an exact repr (one that no other
    value shares and no process changes), else None."""
    parts: List[str] = []

    def walk(value):
        t = type(value)
        if t is tuple or t is list or t is torch.Size:
            parts.append("(" if t is tuple else "[" if t is list else "S(")
            for v in value:
                walk(v)
                parts.append(",")
            parts.append(")")
        elif t in _EXACT_REPR:
            parts.append(t.__name__[0] + repr(value))
        elif value is BLANK:
            parts.append("%")
        elif t is types.BuiltinFunctionType:  # operator.getitem
            parts.append(f"B{value.__module__}.{value.__qualname__}")
        else:
            raise _Unstable(t)

    try:
        walk(key)
    except _Unstable:
        return None
    return "".join(parts)


_identity: Optional[str] = None


def _package() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sources() -> list:
    """Every Python source of the package (the tracer's metadata and the
    lowering decide a compiled graph as much as execution/ does), in a fixed
    order."""
    paths = []
    for folder, dirs, files in sorted(os.walk(_package())):
        dirs.sort()
        paths += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".py")]
    return paths


def _frontend_identity(native) -> str:
    """What besides the trace decides the compiled graph: this package's
    Python sources (the tracer and the lowering), torch, torch-mlir, the
    native build, LLVM and the host CPU."""
    global _identity
    if _identity is None:
        h = hashlib.sha256()
        here = _package()
        for path in _sources():
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, here).encode() + b"\0" + f.read())
        try:
            from importlib.metadata import version

            torch_mlir = version("torch-mlir")
        except Exception:
            torch_mlir = "?"
        h.update(f"\0torch={torch.__version__}\0torch-mlir={torch_mlir}\0".encode())
        h.update(native.code_identity().encode())
        _identity = h.hexdigest()
    return _identity


def record_key(native, graph_key: tuple) -> Optional[str]:
    """The disk key of the record for a trace, None when the trace cannot
    have one (a constant without an exact repr)."""
    text = _stable_repr(graph_key)
    if text is None:
        return None
    return hashlib.sha256((_frontend_identity(native) + "\0record\0" + text).encode()).hexdigest()


def read_record(native, key: str) -> Optional[str]:
    """The compiled graph's cache key recorded for a trace, or None."""
    payload = native.disk_cache_read(key)
    if payload is None:
        return None
    try:
        return str(json.loads(payload.decode())["graph"])
    except (ValueError, KeyError, TypeError):
        return None


def write_record(native, key: str, graph: str) -> None:
    native.disk_cache_write(key, json.dumps({"graph": graph}).encode())
