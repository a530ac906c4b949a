"""``torch.lazy``: the lazy device's module, what PyTorch asks of a PrivateUse1
backend by name (``torch.get_device_module("lazy")``): one device, index 0;
random numbers from the CPU generator (RNG ops run eagerly on the CPU, so a
seed gives eager's numbers); ``synchronize`` waits for the graphs in flight;
streams and events that do nothing (the device's work runs in trace order)."""

import sys

import torch

_CPU_GENERATOR = torch.default_generator


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _check_index(device) -> int:
    index = device if isinstance(device, int) else torch.device(device).index
    if index not in (None, 0, -1):
        raise ValueError(f"lazymlir has a single lazy device, index 0 (got {index})")
    return 0


def set_device(device) -> None:
    _check_index(device)


def get_device_name(device=None) -> str:
    return "lazymlir"


def synchronize(device=None) -> None:
    """Wait until every graph started so far has finished (raises a failed one's error). Also what
    ``torch.accelerator.synchronize()`` and streams' and events' ``synchronize`` call (the device guard, through
    ``_device.set_synchronize``)."""
    if device is not None:
        _check_index(device)
    run = sys.modules.get("lazymlir.execution.run")
    if run is not None:  # else lazymlir is not imported (only the device is, by torch's autoload): no graph ran
        run.wait_device_ops()


def manual_seed(seed: int) -> None:
    _CPU_GENERATOR.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    _CPU_GENERATOR.manual_seed(int(seed))


def seed() -> None:
    _CPU_GENERATOR.seed()


def seed_all() -> None:
    _CPU_GENERATOR.seed()


def initial_seed() -> int:
    return _CPU_GENERATOR.initial_seed()


def get_rng_state(device="lazy") -> torch.Tensor:
    return _CPU_GENERATOR.get_state()


def set_rng_state(new_state: torch.Tensor, device="lazy") -> None:
    _CPU_GENERATOR.set_state(new_state)


def get_amp_supported_dtype():
    """The dtypes ``torch.autocast("lazy", dtype=...)`` accepts."""
    return [torch.bfloat16, torch.float16]


class Stream:
    """The device's only stream: work is ordered by the trace."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = torch.device("lazy", 0)
        self.priority = priority

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        return event if event is not None else Event()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        synchronize()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return isinstance(other, Stream)

    def __hash__(self):
        return hash(Stream)


class Event:
    """Recorded on the device's only stream (see :class:`Stream`): ``synchronize`` waits for every graph in
    flight, as the stream's does."""

    def __init__(self, enable_timing: bool = False, **kwargs):
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        synchronize()


_STREAM = Stream()


def current_stream(device=None) -> Stream:
    return _STREAM


def default_stream(device=None) -> Stream:
    return _STREAM


def set_stream(stream) -> None:
    pass


class StreamContext:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
