"""Runs GPU graphs compiled by ``lazymlir-gpu-pipeline`` with torch and the CUDA
driver alone, and keeps them in versioned bundles.

This module imports nothing but torch and the standard library (no MLIR, no
``lazymlir._native``): a bundle compiled on a machine without a GPU runs on a
GPU machine with another Python and torch. A compiled graph is a *launch plan*
(``lazymlir-gpu-launch-plan``'s JSON): the graph's buffers with their layouts,
steps in program order (``alloc``, ``view``, ``copy``, ``constant``,
``dealloc``, ``launch``) and each kernel module's PTX. :class:`GpuExecutable`
executes one on the current CUDA device and stream: buffers from torch's
caching allocator, kernels loaded with ``cuModuleLoadData`` (the driver
JIT-compiles the PTX for the device) and launched with ``cuLaunchKernel``, the
runtime-check flag read back after a run.

A bundle (:func:`save_bundle`, :func:`load_bundle`) is one JSON file of named
plans for one chip, with a format version and a SHA-256 checksum of its
graphs; loading refuses another format or version, a corrupted file and a
chip the device cannot run, each with a :class:`BundleError` saying which.
"""

import base64
import ctypes
import hashlib
import json
from typing import Dict, List, Optional

import torch

PLAN_FORMAT, PLAN_VERSION = "lazymlir-gpu-plan", 1
BUNDLE_FORMAT, BUNDLE_VERSION = "lazymlir-gpu-bundle", 1

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
}
_STEPS = {"alloc", "view", "copy", "constant", "dealloc", "launch"}


class BundleError(RuntimeError):
    """A bundle or plan that cannot be used: the message says why."""


class CheckFailed(RuntimeError):
    """A kernel's runtime check failed (an index out of range, an integer
    division by zero): the graph's results are not eager's."""


def chip_of_capability(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


def _chip_number(chip: str) -> int:
    digits = chip[3:].rstrip("af")
    if not chip.startswith("sm_") or not digits.isdigit():
        raise BundleError(f"lazymlir: '{chip}' is not an NVIDIA chip name (sm_80, sm_90, ...)")
    return int(digits)


def can_run(chip: str, device_chip: str) -> bool:
    """Whether PTX compiled for ``chip`` runs on a device of ``device_chip``:
    the driver JIT-compiles PTX for the same or a newer architecture; chips
    with architecture-specific features (sm_90a) run only on themselves."""
    if chip[-1] in "af":
        return chip == device_chip
    return _chip_number(chip) <= _chip_number(device_chip)


def check_chips(chips: List[str], device_chip: str) -> None:
    """Raises BundleError unless a device of ``device_chip`` can run kernels
    compiled for each of ``chips`` (before the driver fails to load them with
    a less telling error)."""
    for chip in chips:
        if not can_run(chip, device_chip):
            raise BundleError(
                f"lazymlir: the graph was compiled for {chip}; this device is {device_chip}, which "
                "cannot run it: compile it for this device's chip"
            )


class GpuExecutable:
    """One compiled graph: ``run(buffers)`` executes its plan on the current
    CUDA device (all arguments, inputs then outputs, CUDA tensors of the
    plan's layouts; outputs are written in place)."""

    def __init__(self, plan: dict):
        _validate_plan(plan)
        self.plan = plan
        self.arguments = plan["arguments"]
        self.chips = sorted({m["chip"] for m in plan["modules"].values()})
        self._loaded = {}  # device index -> {module name: (CUmodule, {kernel: CUfunction})}
        self._constants = {}  # (device index, buffer id) -> tensor
        # The launched modules with a runtime-check flag: read after a run.
        self.checked_modules = frozenset(
            step["module"]
            for step in plan["steps"]
            if step["op"] == "launch" and plan["modules"][step["module"]]["check_flag"]
        )

    @classmethod
    def from_json(cls, text: str) -> "GpuExecutable":
        try:
            plan = json.loads(text)
        except json.JSONDecodeError as e:
            raise BundleError(f"lazymlir: a launch plan that is not JSON: {e}") from None
        return cls(plan)

    def run(self, args: List[torch.Tensor], check: bool = True) -> None:
        """Runs the plan on ``args`` (inputs, then outputs written in place) on
        the current stream. ``check``: then read the runtime-check flags (a
        stream synchronize when a launched module has one) and raise
        :class:`CheckFailed` if one is set; :meth:`capture` runs without."""
        if not torch.cuda.is_available():
            raise RuntimeError("lazymlir: running a GPU graph needs a CUDA device (torch.cuda.is_available() is False)")
        if len(args) != len(self.arguments):
            raise ValueError(f"lazymlir: the graph takes {len(self.arguments)} buffers, got {len(args)}")
        device = args[0].device if args else torch.device("cuda", torch.cuda.current_device())
        for i, (t, layout) in enumerate(zip(args, self.arguments)):
            if (
                t.device != device
                or t.dtype != _DTYPES[layout["dtype"]]
                or list(t.shape) != layout["shape"]
                or list(t.stride()) != layout["strides"]
            ):
                raise ValueError(
                    f"lazymlir: buffer {i} must be a {layout['dtype']} tensor of shape {layout['shape']} "
                    f"and strides {layout['strides']} on {device}, got {t.dtype} {list(t.shape)} "
                    f"{list(t.stride())} on {t.device}"
                )
        check_chips(self.chips, chip_of_capability(*torch.cuda.get_device_capability(device)))
        driver = _driver()
        with torch.cuda.device(device):
            modules = self._modules(driver, device.index)
            stream = torch.cuda.current_stream(device).cuda_stream
            buffers: Dict[int, torch.Tensor] = dict(enumerate(args))
            roots: Dict[int, int] = {i: i for i in range(len(args))}  # buffer -> the buffer it views
            for step in self.plan["steps"]:
                op = step["op"]
                if op == "alloc":
                    layout = step["layout"]
                    buffers[step["buffer"]] = torch.empty_strided(
                        layout["shape"], layout["strides"], dtype=_DTYPES[layout["dtype"]], device=device
                    )
                    roots[step["buffer"]] = step["buffer"]
                elif op == "view":
                    layout, root = step["layout"], roots[step["source"]]
                    base = buffers[root]
                    buffers[step["buffer"]] = base.as_strided(
                        layout["shape"], layout["strides"], base.storage_offset() + layout["offset"]
                    )
                    roots[step["buffer"]] = root
                elif op == "copy":
                    buffers[step["target"]].copy_(buffers[step["source"]])
                elif op == "constant":
                    buffers[step["buffer"]] = self._constant(step, device)
                    roots[step["buffer"]] = step["buffer"]
                elif op == "dealloc":
                    buffers.pop(step["buffer"], None)
                elif op == "launch":
                    module, functions = modules[step["module"]]
                    params = [self._param(a, buffers, roots) for a in step["args"]]
                    pointers = (ctypes.c_void_p * len(params))(
                        *[ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in params]
                    )
                    grid, block = step["grid"], step["block"]
                    _check(
                        driver.cuLaunchKernel(
                            functions[step["kernel"]],
                            grid[0],
                            grid[1],
                            grid[2],
                            block[0],
                            block[1],
                            block[2],
                            0,
                            ctypes.c_void_p(stream),
                            pointers,
                            None,
                        ),
                        "cuLaunchKernel",
                    )
            if self.checked_modules and check:
                self._read_check_flags(driver, modules, self.checked_modules, stream)

    def capture(self, args: List[torch.Tensor]) -> "CapturedRun":
        """The plan on ``args`` as a CUDA graph: one replay launches every
        kernel with no Python in between. Runs the plan once first (loads the
        modules, uploads the constants, checks the flags), then captures a
        second run; its temporaries live in the graph's memory pool. The
        ``args`` must stay alive and in place while the graph is replayed."""
        self.run(args)
        device = args[0].device if args else torch.device("cuda", torch.cuda.current_device())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(device):
            torch.cuda.synchronize(device)
            with torch.cuda.graph(graph):
                self.run(args, check=False)
        return CapturedRun(self, graph, device)

    @staticmethod
    def _param(arg: dict, buffers: Dict[int, torch.Tensor], roots: Dict[int, int]):
        if "buffer" in arg:
            # The bare-pointer convention: a buffer is passed as the pointer
            # its layout's offset counts from (its root's first element).
            t = buffers[arg["buffer"]]
            root = buffers[roots[arg["buffer"]]]
            return ctypes.c_void_p(t.data_ptr() - (t.storage_offset() - root.storage_offset()) * t.element_size())
        if "i64" in arg:
            return ctypes.c_int64(arg["i64"])
        if "i32" in arg:
            return ctypes.c_int32(arg["i32"])
        if "f32" in arg:
            return ctypes.c_float(arg["f32"])
        raise BundleError(f"lazymlir: a kernel argument the runtime does not know: {arg}")

    def _constant(self, step: dict, device: torch.device) -> torch.Tensor:
        key = (device.index, step["buffer"])
        if key not in self._constants:
            layout = step["layout"]
            data = bytearray(base64.b64decode(step["data"]))
            host = torch.frombuffer(data, dtype=_DTYPES[layout["dtype"]]).reshape(layout["shape"])
            self._constants[key] = host.to(device)
        return self._constants[key]

    def _modules(self, driver, index: int):
        if index not in self._loaded:
            loaded = {}
            kernels = {}
            for step in self.plan["steps"]:
                if step["op"] == "launch":
                    kernels.setdefault(step["module"], set()).add(step["kernel"])
            for name, module in self.plan["modules"].items():
                handle = ctypes.c_void_p()
                ptx = module["ptx"].encode() + b"\0"
                _check(driver.cuModuleLoadData(ctypes.byref(handle), ptx), f"cuModuleLoadData ({name})")
                functions = {}
                for kernel in kernels.get(name, ()):
                    function = ctypes.c_void_p()
                    _check(
                        driver.cuModuleGetFunction(ctypes.byref(function), handle, kernel.encode()),
                        f"cuModuleGetFunction ({name}.{kernel})",
                    )
                    functions[kernel] = function
                loaded[name] = (handle, functions)
            self._loaded[index] = loaded
        return self._loaded[index]

    def _read_check_flags(self, driver, modules, flagged, stream) -> None:
        failed = []
        for name in sorted(flagged):
            pointer, size = ctypes.c_uint64(), ctypes.c_size_t()
            _check(
                driver.cuModuleGetGlobal_v2(
                    ctypes.byref(pointer), ctypes.byref(size), modules[name][0], b"__lazymlir_check_failed"
                ),
                "cuModuleGetGlobal",
            )
            value = ctypes.c_int32()
            _check(driver.cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")
            _check(driver.cuMemcpyDtoH_v2(ctypes.byref(value), pointer, 4), "cuMemcpyDtoH")
            if value.value:
                _check(driver.cuMemsetD32_v2(pointer, 0, 1), "cuMemsetD32")
                failed.append(name)
        if failed:
            raise CheckFailed(
                f"lazymlir: a runtime check failed in kernel module(s) {', '.join(failed)} "
                "(an index out of range or an integer division by zero)"
            )


class CapturedRun:
    """A plan captured as a CUDA graph (:meth:`GpuExecutable.capture`)."""

    def __init__(self, executable: GpuExecutable, graph, device: torch.device):
        self.executable, self.graph, self.device = executable, graph, device

    def replay(self, check: bool = True) -> None:
        """Launches the captured kernels on the current stream; ``check``:
        then reads the runtime-check flags (a synchronize) as
        :meth:`GpuExecutable.run` does."""
        self.graph.replay()
        if check and self.executable.checked_modules:
            self.check()

    def check(self) -> None:
        """Raises CheckFailed if a replay since the last check set a flag."""
        with torch.cuda.device(self.device):
            driver = _driver()
            modules = self.executable._modules(driver, self.device.index)
            stream = torch.cuda.current_stream(self.device).cuda_stream
            self.executable._read_check_flags(driver, modules, self.executable.checked_modules, stream)


def _validate_plan(plan) -> None:
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise BundleError(f"lazymlir: not a {PLAN_FORMAT} launch plan")
    if plan.get("version") != PLAN_VERSION:
        raise BundleError(
            f"lazymlir: launch plan version {plan.get('version')}, this runtime reads version "
            f"{PLAN_VERSION}: recompile the graph with this lazymlir"
        )
    for layout in plan.get("arguments", []):
        if layout.get("dtype") not in _DTYPES:
            raise BundleError(f"lazymlir: a buffer of dtype {layout.get('dtype')} the runtime does not know")
    modules = plan.get("modules", {})
    for step in plan.get("steps", []):
        if step.get("op") not in _STEPS:
            raise BundleError(f"lazymlir: a plan step the runtime does not know: {step.get('op')}")
        if step["op"] == "launch" and step.get("module") not in modules:
            raise BundleError(f"lazymlir: a launch of module {step.get('module')}, which the plan lacks")


_DRIVER = None


def _driver():
    global _DRIVER
    if _DRIVER is None:
        try:
            _DRIVER = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"lazymlir: the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from None
        for name in (
            "cuModuleLoadData",
            "cuModuleGetFunction",
            "cuLaunchKernel",
            "cuModuleGetGlobal_v2",
            "cuMemcpyDtoH_v2",
            "cuMemsetD32_v2",
            "cuStreamSynchronize",
            "cuGetErrorString",
        ):
            getattr(_DRIVER, name).restype = ctypes.c_int
        _DRIVER.cuLaunchKernel.argtypes = (
            [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        )
        _DRIVER.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        _DRIVER.cuModuleGetGlobal_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        _DRIVER.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        _DRIVER.cuMemsetD32_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t]
    return _DRIVER


def _check(result: int, what: str) -> None:
    if result != 0:
        message = ctypes.c_char_p()
        _DRIVER.cuGetErrorString(result, ctypes.byref(message))
        text = message.value.decode() if message.value else "unknown error"
        raise RuntimeError(f"lazymlir: {what} failed: CUDA error {result} ({text})")


def _checksum(graphs: dict) -> str:
    return hashlib.sha256(json.dumps(graphs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def save_bundle(path: str, graphs: Dict[str, dict], chip: str, producer: str = "") -> None:
    """Write ``graphs`` (name -> launch plan, all compiled for ``chip``) as one
    bundle file."""
    for name, plan in graphs.items():
        _validate_plan(plan)
        chips = {m["chip"] for m in plan["modules"].values()}
        if chips - {chip}:
            raise BundleError(f"lazymlir: graph {name} was compiled for {sorted(chips)}, the bundle is for {chip}")
    bundle = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "chip": chip,
        "producer": producer,
        "graphs": graphs,
        "checksum": _checksum(graphs),
    }
    with open(path, "w") as f:
        json.dump(bundle, f, sort_keys=True, separators=(",", ":"))


def load_bundle(path: str, device_chip: Optional[str] = None) -> Dict[str, GpuExecutable]:
    """The bundle's graphs as executables. ``device_chip`` (default: the
    current CUDA device's, when there is one) must be able to run the
    bundle's chip; a file of another format or version, or whose checksum
    does not match its graphs, is refused."""
    try:
        with open(path) as f:
            bundle = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(f"lazymlir: {path} is not a readable bundle: {e}") from None
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"lazymlir: {path} is not a {BUNDLE_FORMAT} file")
    if bundle.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"lazymlir: {path} is bundle version {bundle.get('version')}; this lazymlir reads "
            f"version {BUNDLE_VERSION}: compile the bundle again"
        )
    graphs = bundle.get("graphs")
    if not isinstance(graphs, dict) or bundle.get("checksum") != _checksum(graphs):
        raise BundleError(f"lazymlir: {path} is corrupted (its checksum does not match its graphs)")
    chip = bundle.get("chip", "")
    if device_chip is None and torch.cuda.is_available():
        device_chip = chip_of_capability(*torch.cuda.get_device_capability())
    if device_chip is not None and not can_run(chip, device_chip):
        raise BundleError(
            f"lazymlir: {path} was compiled for {chip}; this device is {device_chip}, which cannot "
            "run it: compile the bundle for this device's chip"
        )
    return {name: GpuExecutable(plan) for name, plan in graphs.items()}
