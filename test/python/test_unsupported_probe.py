"""The probe that finds the ops of a failed graph that do not lower
(linalg.find_unsupported) tries each op's first configuration before the
op's other configurations: a graph with more configurations than the
probe's limit still has the op that does not lower found, split out and run
eagerly, and the rest compiled (Funnel's training step: 93 configurations,
avg_pool2d_backward the 85th, limit 64: its whole graph ran eagerly)."""

import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import metrics
from lazymlir.lowering import linalg
from lazymlir.lowering.marks import probe_order

from conftest import assert_compiled

LIMIT = 12
RANKS = range(1, 7)


def _step(x, others):
    """Many configurations of a few ops (mul, add, sum on ranks 1 to 6),
    then avg_pool2d (ceil_mode, as Funnel's pooling) and its backward, which
    depends on them all: the graph's last ops in any order."""
    x = x.detach().requires_grad_()
    scale = 0
    for t in others:
        scale = scale + (t * 2 + 1).sum()
    y = F.avg_pool2d(x, 2, 2, ceil_mode=True)
    (y * scale).sum().backward()
    return y, x.grad


def test_an_op_past_the_probe_limit_in_graph_order_is_found(monkeypatch, native_built, fresh_cache):
    ops = sys.modules["lazymlir.frontend.ops"]
    op = torch.ops.aten.avg_pool2d_backward.default
    saved = ops._eager_dtypes.get(op)
    ops._forget_eager(op)  # an earlier test may have marked it: then it would not reach the graph
    monkeypatch.setattr(linalg, "PROBE_LIMIT", LIMIT)
    orders = []
    real = linalg.find_unsupported

    def find_unsupported(graph, *args, **kwargs):
        key = linalg.unsupported_key
        tried = probe_order(graph.nodes, lambda n: key(n) if isinstance(n.op, torch._ops.OpOverload) else None)
        in_graph_order = []
        for n in graph.nodes:
            if isinstance(n.op, torch._ops.OpOverload) and key(n) not in [key(m) for m in in_graph_order]:
                in_graph_order.append(n)
        orders.append(([n.op for n in in_graph_order], [n.op for n in tried]))
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(linalg, "find_unsupported", find_unsupported)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 5)
    others = [torch.randn((2,) * r) for r in RANKS]
    want = _step(x, others)
    metrics.reset()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _step(x.to("lazy"), [t.to("lazy") for t in others])
            lazymlir.mark_step()
        torch.testing.assert_close(got[0].cpu(), want[0])
        torch.testing.assert_close(got[1].cpu(), want[1])
        # The graph: more configurations than the limit before the op in
        # graph order (the probe tried in that order before: not found).
        ((in_graph_order, tried),) = orders
        assert in_graph_order.index(op) >= LIMIT, in_graph_order
        assert tried.index(op) < LIMIT, tried
        messages = [str(w.message) for w in caught]
        assert any("aten.avg_pool2d_backward.default" in m and "the rest compiles" in m for m in messages), messages
        assert not any("failed to compile" in m for m in messages), messages
        # torch-mlir lowers no avg_pool2d_backward: that op alone ran eagerly.
        assert_compiled("aten::avg_pool2d_backward")
    finally:
        ops._forget_eager(op)
        if saved is not None:
            ops._eager_dtypes[op] = saved


@pytest.mark.parametrize("limit", [3, 100])
def test_probe_order_tries_each_op_first_then_its_dtypes_then_the_rest(limit):
    """probe_order on plain keys (op, (dtypes, ranks, constants)): one node
    per distinct key; an op's first configuration, then its first with other
    dtypes, then the others, each group in graph order."""
    f32, f64 = (torch.float32,), (torch.float64,)
    keys = [
        ("mul", (f32, (1,), ())),
        ("mul", (f32, (2,), ())),
        ("mul", (f32, (1,), ())),  # seen: dropped
        ("add", (f32, (1,), ())),
        ("mul", (f64, (1,), ())),
        None,  # not tried
        ("add", (f32, (3,), ())),
        ("pool", (f32, (4,), ())),
    ]
    order = probe_order(range(len(keys)), keys.__getitem__)
    assert order == [0, 3, 7, 4, 1, 6]
    assert [keys[i][0] for i in order[:3]] == ["mul", "add", "pool"]
    failing = {keys[7]}
    assert linalg.distinct_failures(order, keys.__getitem__, lambda i: keys[i] in failing, limit) == failing
