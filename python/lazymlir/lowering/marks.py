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


def probe_order(nodes, key) -> list:
    """``nodes`` with a distinct ``key(n)`` (an unsupported_key; None: not
    tried), one per key, in the order the probe tries them (it tries at most
    its limit): the first configuration of each op, then the first of each
    op and input dtypes, then the others, each group in graph order. A large
    graph has more configurations than the limit (Funnel's training step: 93,
    from 55 ops and dtypes): tried in graph order, the backward ops at its end
    went untried, so the one that did not lower (avg_pool2d_backward) was not
    found and the whole graph ran eagerly."""
    firsts, by_dtypes, others = [], [], []
    seen, ops, op_dtypes = set(), set(), set()
    for n in nodes:
        k = key(n)
        if k is None or k in seen:
            continue
        seen.add(k)
        op, dtypes = k[0], k[1][0]
        if op not in ops:
            firsts.append(n)
        elif (op, dtypes) not in op_dtypes:
            by_dtypes.append(n)
        else:
            others.append(n)
        ops.add(op)
        op_dtypes.add((op, dtypes))
    return firsts + by_dtypes + others
