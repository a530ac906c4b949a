"""linalg-on-tensors text -> a CPU executable, through the private native module.

The boundary between the Python lazy device and the C++ backend (MLIR 22): the
frontend hands over textual linalg-on-tensors IR (DESIGN.md, decision 1), and
gets back a ``_native.CpuExecutable`` that runs on torch CPU tensors in place:

- ``inputs`` / ``outputs``: [(element type, shape)] of the arguments and results;
- ``kernel_count``: loop nests left after fusion, one per kernel the graph runs;
- ``has_runtime_checks``: whether runs check the flag the compiled code sets
  when an index is out of range or an integer divisor is zero;
- ``llvm_dialect``: LLVM-dialect text after the CPU pipeline ("" unless kept);
- ``compile_stats``: where the compile's time went, in seconds (parse,
  tensor_stage, bufferize_stage, llvm_stage, translate, optimize, codegen, link,
  total; the per-kernel phases are summed over kernels compiled in parallel),
  and its sizes (input_ops, loop_nests, distinct_kernels, kernels_compiled /
  _reused (already in this process) / _from_disk, llvm_instructions,
  object_bytes); from_disk: nothing was compiled;
- ``cache_key``: the graph's key in the disk cache (see :func:`load_cached`);
- ``fully_optimized``: no kernel is waiting for its background recompile;
- ``profile_sites`` / ``take_profile_events()``: the timed kernel call sites
  and calls of a graph compiled with ``profile=True`` (lazymlir.profiler);
- ``run(inputs, outputs, background=False)``: runs on contiguous CPU tensors
  that do not require grad, writing the results into ``outputs`` (destination
  passing) with the GIL released. Raises ValueError on a mismatch in count,
  dtype, shape or layout, :data:`CheckFailed` (after the run, outputs garbage)
  when a runtime check failed. ``background``: called on a worker while the
  thread that submitted the run may be busy; the run's parallel loops then
  keep one thread asleep (leaving that thread a core) until it blocks in
  :func:`host_wait`;
- ``run_raw(input_addresses, input_bytes, output_addresses, output_bytes,
  background=False, shapes=None)``: ``run`` on raw buffers (see
  :func:`run_allocated`); ``shapes`` (every buffer's sizes) is required for
  a dynamic graph.
"""

import contextlib
from typing import List, Sequence

import torch

from .. import _native

#: Raised when MLIR rejects the input or a pass fails; the message carries
#: MLIR's diagnostics.
CompileError = _native.CompileError

#: Raised by a run whose runtime check failed (an index out of range, an
#: integer division by zero): the compiled code stayed inside its buffers and
#: trapped on nothing, but its outputs are garbage. A subclass of RuntimeError.
CheckFailed = _native.CheckFailed


def run_allocated(
    executable,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    *,
    background: bool = False,
    dynamic: bool = False,
) -> None:
    """``executable.run`` for a caller that made every buffer contiguous with
    its signature's dtype and shape (the lazy runtime, whose cache key fixes
    them): only counts and byte sizes are checked, which skips DLPack's few
    microseconds per buffer. ``dynamic``: the executable has dynamic
    dimensions, and each buffer's sizes go with it (checked against the
    signature). Raises :data:`CheckFailed` like ``run``."""
    shapes = [t.shape for t in inputs] + [t.shape for t in outputs] if dynamic else None
    executable.run_raw(
        [t.data_ptr() for t in inputs],
        [t.nbytes for t in inputs],
        [t.data_ptr() for t in outputs],
        [t.nbytes for t in outputs],
        background,
        shapes,
    )


def buffer_pool_functions():
    """The addresses of the runtime's buffer pool functions (allocate a
    number of bytes, release a block, allocate for a graph run eagerly,
    allocate an output, an output's first write is next), for
    lazymlir._device, which makes output tensors from the pool and serves a
    graph run eagerly from it (``_device.set_buffer_pool``)."""
    return _native.buffer_pool_functions()


def raw_run_function() -> int:
    """The address of the runtime's C function that runs a static graph on
    raw buffers (``CpuExecutable.address``, then the buffers' addresses and
    byte sizes), for lazymlir._device's replay of a compiled step
    (``_device.set_run_function``)."""
    return _native.raw_run_function()


def trim_buffer_pool() -> int:
    """Return the pool's idle blocks to the system; the bytes returned."""
    return _native.trim_buffer_pool()


@contextlib.contextmanager
def host_wait():
    """Bracket a blocking wait for background runs: while it lasts, their
    parallel loops use every core."""
    _native.host_wait_begin()
    try:
        yield
    finally:
        _native.host_wait_end()


def configure_disk_cache(directory: str, max_bytes: int) -> None:
    """Keep compiled graphs and kernels (object code) in ``directory`` ("":
    nowhere), at most ``max_bytes`` of them (least recently used go first).
    Entries are keyed by their IR and what else changes the code: this
    build, LLVM's version, the options, the host CPU and its features."""
    _native.configure_disk_cache(directory, max_bytes)


def disk_cache_counts() -> dict:
    """graph_hits / graph_misses (graphs looked up whole), hits, misses,
    corrupt, writes, evicted (entries of any kind), since the process started."""
    return _native.disk_cache_counts()


def take_disk_cache_warnings() -> List[str]:
    """What went wrong with the disk cache (a corrupt entry, an unwritable
    directory) since the last call; each is reported once."""
    return _native.take_disk_cache_warnings()


def disk_cache_read(key: str):
    """A verified entry (bytes) the caller wrote with :func:`disk_cache_write`, or None."""
    return _native.disk_cache_read(key)


def disk_cache_write(key: str, payload: bytes) -> None:
    _native.disk_cache_write(key, payload)


def code_identity() -> str:
    """What besides the IR and options changes compiled code (this build,
    LLVM, the host CPU): part of every disk cache key."""
    return _native.code_identity()


def _options(options: dict):
    """A native CompileOptions: its defaults, with ``options`` (keyword
    names as in :func:`compile_linalg`) set."""
    native = _native.CompileOptions()
    for name, value in options.items():
        if not hasattr(native, name):
            raise TypeError(f"unknown compile option {name!r}")
        setattr(native, name, value)
    return native


def load_cached(cache_key: str, **options):
    """The graph compiled before under ``cache_key`` (an executable's ``cache_key``)
    with these options (as for :func:`compile_linalg`), loaded from the disk
    cache without any MLIR work; None when it is not there whole."""
    return _native.load_cpu(cache_key, _options(options))


def wait_background_compiles() -> None:
    """Block until every full-effort recompile requested so far is done (and
    the graphs run the optimized code)."""
    _native.wait_background_compiles()


def stop_background_compiles() -> None:
    """Stop the background compiler after the kernel it is compiling."""
    _native.stop_background_compiles()


def background_compile_counts() -> dict:
    """kernels_upgraded (recompiled at full effort), graphs_relinked."""
    return _native.background_compile_counts()


def compile_linalg(linalg_text: str, **options):
    """Compile linalg-on-tensors text whose entry is ``func.func @main``.

    Options (keywords; the defaults are the native CompileOptions'):
    ``fusion`` (True) fuses elementwise ops with each other and into
    contractions; ``channels_last`` (True) runs convolutions and pooling in
    NHWC; ``threads`` (0) splits large kernels' outer loops across that many
    threads (0: all hardware threads; 1: none); ``parallel_threshold``
    (65536 iteration points) is the size from which a kernel runs on several
    threads; ``streaming_store_bytes`` (16 MiB) the output size from which an
    elementwise kernel stores with non-temporal vector stores (0: never);
    ``keep_llvm_dialect`` (False) keeps the LLVM-dialect text (for dumps);
    ``runtime_checks`` (True; False drops the bounds and divisor checks: a
    bad index then reads foreign memory or aborts, only to measure what they
    cost); ``tiered`` (True) compiles kernels with little code generation
    effort first (code ~15% slower, compiled several times quicker) and at
    full effort in the background once the graph has run ``tier_up_runs``
    (4) times, switching runs to that code when ready (False: full effort at
    once); ``profile`` (False) times each kernel call of the graph
    (``profile_sites``, ``take_profile_events()``: see lazymlir.profiler);
    ``opt_level`` (3). Releases the GIL while compiling; raises
    :data:`CompileError` with MLIR's diagnostics.

    Each loop nest is outlined into a kernel named by its content
    (lazymlir-outline-kernels); distinct kernels compile in parallel, once
    per process, and with the disk cache configured
    (:func:`configure_disk_cache`) once per machine: the graph itself is
    looked up there first.
    """
    return _native.compile_cpu(linalg_text, _options(options))


def cuda_toolkit() -> str:
    """The directory holding ptxas (``bin/``) and libdevice
    (``nvvm/libdevice/libdevice.10.bc``) the GPU target uses: LAZYMLIR_CUDA_PATH,
    else the nvidia-cuda-nvcc / nvidia-nvvm wheels in this Python's
    site-packages (``nvidia/cu13``, what ``make`` installs), else
    /usr/local/cuda. Raises FileNotFoundError naming where it looked."""
    import glob
    import os
    import sys

    tried = []
    if os.environ.get("LAZYMLIR_CUDA_PATH"):
        tried.append(os.environ["LAZYMLIR_CUDA_PATH"])
    tried += sorted(glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu13")))
    tried.append("/usr/local/cuda")
    for root in tried:
        if os.path.exists(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")):
            return root
    raise FileNotFoundError(
        "lazymlir: no libdevice.10.bc under "
        + ", ".join(tried)
        + " (pip install nvidia-nvvm nvidia-cuda-nvcc, or set LAZYMLIR_CUDA_PATH)"
    )


def compile_gpu(
    linalg_text: str,
    chip: str = "sm_90",
    *,
    libdevice: str = "",
    features: str = "",
    block_size: int = 256,
    fusion: bool = True,
) -> dict:
    """Compile linalg-on-tensors text for an NVIDIA GPU (``chip``: sm_80,
    sm_90, ...) on any machine: the launch plan (a dict; see
    lazymlir.gpu.launch, which runs it with torch and the CUDA driver) with
    every kernel's PTX. ``libdevice`` defaults to the one in
    :func:`cuda_toolkit`; ``features`` to the chip's lowest PTX version.
    Raises :data:`CompileError` with MLIR's diagnostics (an unknown chip or a
    PTX version too low for it included)."""
    import json
    import os

    if not libdevice:
        libdevice = os.path.join(cuda_toolkit(), "nvvm", "libdevice", "libdevice.10.bc")
    return json.loads(_native.compile_gpu(linalg_text, chip, libdevice, features, block_size, fusion))
