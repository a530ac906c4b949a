"""What marks an op found not to lower (linalg.find_unsupported's probe):
its configuration, :func:`op_config`. The lazy device runs a marked
configuration eagerly and records the op's others."""


def op_config(inputs, constants) -> tuple:
    """The configuration an op is marked not to lower with: its inputs'
    dtypes and ranks and its constants (``constants``: a node's signature
    without its name) with every number blanked. Sizes, positions and scales
    change from step to step (a new sequence length, a decode position):
    keyed by them, an op that lowers for no size would cost a failed
    compile and a probe at every new one. The C++ fast path's key holds
    all of this (a lifted op's floats aside: blanked here too)."""
    return (tuple(i.meta.dtype for i in inputs), tuple(i.meta.dim() for i in inputs), _numbers_blanked(constants))


def marked(marks, inputs, constants) -> bool:
    """Whether an op's ``marks`` (a set of op_config, or of input dtypes
    alone: marked for every configuration with them, as torch.compile's
    regions mark) hold it on ``inputs`` with ``constants``."""
    config = op_config(inputs, constants)
    return config in marks or config[0] in marks


_NUMBER = "<number>"


def _numbers_blanked(frozen):
    t = type(frozen)
    if t is int or t is float:
        return _NUMBER
    if t is tuple:
        if len(frozen) == 2 and frozen[0] == "f":  # ir.freeze's float
            return _NUMBER
        return tuple(_numbers_blanked(f) for f in frozen)
    return frozen
