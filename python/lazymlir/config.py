"""lazymlir configuration.

Every ``LAZYMLIR_*`` environment variable is read here and nowhere else, once,
at import.  Code reads the module attributes (``config.dump_dir``) at the point
of use, so tests can change them with :func:`patch`.
"""

import contextlib
import os
from typing import Optional


def _env_str(name: str, default: Optional[str]) -> Optional[str]:
    value = os.environ.get(name)
    return value if value else default


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


# Directory where every compiled graph is written as <hash>.torch.mlir,
# <hash>.linalg.mlir and <hash>.llvm.mlir.  None: no dumps.
dump_dir: Optional[str] = _env_str("LAZYMLIR_DUMP_DIR", None)

# Where compiled graphs run.  Only "cpu" exists so far (the NVVM GPU target is
# a later issue); any other value is an error rather than a silent CPU run.
DEVICES = ("cpu",)


def _check_device(value: str) -> str:
    if value not in DEVICES:
        raise ValueError(
            f"lazymlir: LAZYMLIR_DEVICE={value!r} is not a target lazymlir has; choose one of {', '.join(DEVICES)}"
        )
    return value


device: str = _check_device(_env_str("LAZYMLIR_DEVICE", "cpu"))

# Let the native compiler fuse elementwise ops (part of the cache key).
fusion: bool = _env_bool("LAZYMLIR_FUSION", True)

# Let the native compiler run convolutions and pooling in NHWC
# (lazymlir-channels-last; part of the cache key).  Tensors keep their memory
# format either way: channels_last device data is passed to compiled graphs as
# is, and outputs come back in the memory format eager PyTorch gives them.
channels_last: bool = _env_bool("LAZYMLIR_CHANNELS_LAST", True)

# Threads that share each large kernel's outer loops (OpenMP worksharing loops;
# part of the cache key).  0, the default: all hardware threads; 1: every
# kernel runs in the worker thread alone; N: N threads.  Kernels below the
# parallel threshold always run in one thread.
threads: int = int(_env_str("LAZYMLIR_THREADS", "0"))

# Iteration points from which a kernel's loops are shared by the threads
# (LAZYMLIR_PARALLEL_THRESHOLD, default 65536; a fork/join costs microseconds,
# more than small kernels take).  Part of the cache key.
parallel_threshold: int = int(_env_str("LAZYMLIR_PARALLEL_THRESHOLD", str(1 << 16)))

# Output bytes from which an elementwise kernel stores with non-temporal vector
# stores, past the caches (LAZYMLIR_STREAMING_STORE_BYTES, default 16 MiB; 0:
# never).  Part of the cache key.
streaming_store_bytes: int = int(_env_str("LAZYMLIR_STREAMING_STORE_BYTES", str(16 << 20)))

# Run every graph eagerly (op by op, on CPU) instead of compiling it: a debugging
# aid to tell a compiler bug from a tracer bug.  Counted as "EagerGraph".
force_eager: bool = _env_bool("LAZYMLIR_FORCE_EAGER", False)

# Comma-separated aten op names (e.g. "aten::mm,aten::addmm") that always run
# eagerly, like torch._lazy's LTC_FORCE_FALLBACK.
force_fallback: str = _env_str("LAZYMLIR_FORCE_FALLBACK", "") or ""

# Run graphs on a worker thread (mark_step() returns while they run); 0 runs
# them in the calling thread, a debugging aid.
async_execution: bool = _env_bool("LAZYMLIR_ASYNC", True)

# Replay a step whose graph was compiled and run before from the device's C++
# (LAZYMLIR_REPLAY, default on; lazymlir.execution.run.replay): a barrier, or a
# mark_step() waited for at once, skips the Python of the cache hit path. 0:
# every step takes that path (to rule the replay out when hunting a bug).
replay: bool = _env_bool("LAZYMLIR_REPLAY", True)

# Graphs submitted to the worker and not finished yet, at most: a step that
# would exceed it waits (in mark_step() or the barrier that submits it) for
# the oldest one.  When tracing is faster than running, an unbounded queue
# would hold every pending step's inputs and outputs (gigabytes over a few
# hundred training steps).  1: mark_step() of step k+1 waits for step k, so
# step k+1 is traced while step k runs, and step k+2 while k+1 runs; a step
# that fails is known at the next mark_step(), which raises its error and
# gives back what it wrote (frontend.barriers), before anything else is
# traced on top of it.  Larger values queue more steps (more memory: each
# holds a copy of what it writes) and a failure surfaces later.
max_in_flight: int = max(1, int(_env_str("LAZYMLIR_MAX_IN_FLIGHT", "1")))


# Donated state (LAZYMLIR_DONATE_MB, default 16): a step that writes new
# values into storages it read (parameters, gradients, optimizer moments) has
# them written into the buffers of the old values, when nothing else can read
# those, once the step's graph updates at least this many MiB of them; the
# old and the new model are then never both alive (issue 49;
# frontend.barriers, run.execute). Smaller updates keep copy semantics, and
# the replay from C++ that only a graph without donation gets. 0: every
# update that can; -1: never.
donate_min_bytes: int = int(float(_env_str("LAZYMLIR_DONATE_MB", "16")) * (1 << 20))


def _default_cache_dir() -> Optional[str]:
    value = os.environ.get("LAZYMLIR_CACHE_DIR")
    if value is not None:
        return value or None  # set and empty: no disk cache
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lazymlir")


# Where compiled code is kept across processes (the persistent compile cache):
# LAZYMLIR_CACHE_DIR, by default $XDG_CACHE_HOME/lazymlir or ~/.cache/lazymlir;
# LAZYMLIR_CACHE_DIR= (empty) turns it off (None).
cache_dir: Optional[str] = _default_cache_dir()

# The disk cache's size limit in bytes (LAZYMLIR_CACHE_MAX_MB, default 2048):
# past it, the least recently used entries are deleted.
cache_max_bytes: int = int(_env_str("LAZYMLIR_CACHE_MAX_MB", "2048")) << 20

# Tiered compilation (LAZYMLIR_TIERED, default on): kernels are compiled with
# little code generation effort first (their code ~15% slower, compiled
# several times quicker) and again at full effort on a background thread once
# their graph has run four times; runs switch to that code when it is ready.
# 0: full effort at once (longer first steps).
tiered: bool = _env_bool("LAZYMLIR_TIERED", True)

# Runs of a graph after which tiered compilation recompiles its kernels at full
# effort (LAZYMLIR_TIER_UP_RUNS, a count, default 4).
tier_up_runs: int = max(1, int(_env_str("LAZYMLIR_TIER_UP_RUNS", "4")))

# Graphs of at least this many traced ops (LAZYMLIR_COMPILE_ASIDE_OPS,
# default 1000; 0: never) compile in a child process while they run eagerly,
# instead of stopping the step for the compile: a 12-layer transformer's
# training step takes tens of seconds to lower and compile on a small host,
# and a compile in the user's process leaves it holding the compiler's
# memory (a 4-layer hidden-512 step, 1084-1328 ops: 0.45 GiB, half the
# process eager needs). The compile starts at the graph's third run (a graph run once never pays
# for one), one child at a time, niced; the child writes the disk cache, and
# the first run after it finished loads the compiled graph from there. Needs
# the disk cache (cache_dir); a child that crashes or fails leaves the graph
# eager with a warning, one that finds ops that do not lower leaves those
# ops eager, as an in-process compile would (lazymlir.execution.aside).
compile_aside_ops: int = int(_env_str("LAZYMLIR_COMPILE_ASIDE_OPS", "1000"))

# A graph structure compiled for this many different input shapes gets a
# RuntimeWarning (the recompilation storm: pad or bucket the shapes);
# LAZYMLIR_RECOMPILE_WARNING_AT, a count of shapes, default 8; 0: never warn.
recompile_warning_at: int = int(_env_str("LAZYMLIR_RECOMPILE_WARNING_AT", "8"))

# Automatic dynamic dimensions (LAZYMLIR_DYNAMIC, default on): a graph traced
# again with the same ops and some input sizes changed is compiled once with
# those dimensions symbolic (lazymlir.trace.dynamic), instead of once per size.
# 0: every new size compiles a new graph (lazymlir.mark_dynamic still works).
dynamic: bool = _env_bool("LAZYMLIR_DYNAMIC", True)

# Runs of a dynamic graph at one set of sizes after which those sizes get a
# static graph of their own, compiled in the background (faster code: whole
# tiles, fused epilogues); LAZYMLIR_STATIC_TIER_UP_RUNS, a count, default 8;
# 0: dynamic graphs serve every size for good.
static_tier_up_runs: int = int(_env_str("LAZYMLIR_STATIC_TIER_UP_RUNS", "8"))

# A Python branch on a tensor (one bool: ``if (ids == pad).any():``) whose
# value needs at most this many new ops on finished values, each result at
# most eager_read_elements elements, runs them eagerly instead of compiling a
# graph (LAZYMLIR_EAGER_READ_OPS, default 32; 0: every read compiles): the
# index and mask checks Hugging Face's generate makes before each token
# (cache positions, padding) would otherwise compile graphs of a few ops,
# one per size, that run in microseconds eagerly.
eager_read_ops: int = int(_env_str("LAZYMLIR_EAGER_READ_OPS", "32"))
eager_read_elements: int = 65536

# Profile the whole process (LAZYMLIR_PROFILE=1): graphs compile with their
# kernel calls timed and the per-kernel table prints at exit (see
# lazymlir.profiler; ``lazymlir.profile()`` sets it for a block).  Part of the
# cache key: profiled graphs are instrumented copies.
profile: bool = _env_bool("LAZYMLIR_PROFILE", False)

# Print one line per compilation (graph hash, node count, why it was new).
verbose: bool = _env_bool("LAZYMLIR_VERBOSE", False)

_NAMES = (
    "dump_dir",
    "cache_dir",
    "cache_max_bytes",
    "tiered",
    "tier_up_runs",
    "compile_aside_ops",
    "device",
    "fusion",
    "channels_last",
    "threads",
    "parallel_threshold",
    "streaming_store_bytes",
    "force_eager",
    "force_fallback",
    "async_execution",
    "replay",
    "max_in_flight",
    "donate_min_bytes",
    "recompile_warning_at",
    "profile",
    "verbose",
    "dynamic",
    "static_tier_up_runs",
    "eager_read_ops",
    "eager_read_elements",
)


def snapshot() -> dict:
    """Every option's value (for a child process: :func:`apply`)."""
    g = globals()
    return {name: g[name] for name in _NAMES}


def apply(values: dict) -> None:
    """Set options from a :func:`snapshot` (for good, unlike :func:`patch`)."""
    _set({name: value for name, value in values.items() if name in _NAMES})


def options_key() -> tuple:
    """The compiler options that change generated code, for the cache key."""
    return (device, fusion, channels_last, threads, parallel_threshold, streaming_store_bytes, profile)


# Called when an option changes through patch(): name -> callbacks (e.g. the
# device drops the op handlers it cached for force_fallback).
_listeners = {}


def on_change(name: str, callback) -> None:
    """Call ``callback()`` whenever :func:`patch` changes option ``name``."""
    _listeners.setdefault(name, []).append(callback)


def _set(values: dict) -> None:
    if "device" in values:
        _check_device(values["device"])
    g = globals()
    changed = [name for name, value in values.items() if g[name] != value]
    g.update(values)
    for name in changed:
        for callback in _listeners.get(name, ()):
            callback()


@contextlib.contextmanager
def patch(**changes):
    """Temporarily set configuration values: ``with config.patch(dump_dir=d): ...``."""
    g = globals()
    unknown = set(changes) - set(_NAMES)
    if unknown:
        raise AttributeError(f"lazymlir.config has no option(s) {sorted(unknown)}")
    saved = {name: g[name] for name in changes}
    _set(changes)
    try:
        yield
    finally:
        _set(saved)
