"""The fast subset of the OpInfo conformance sweep (``tools/conformance.py``).

A few samples of each op family (``conformance.SUBSET``: elementwise unary and
binary, reductions, matmul/linear, conv and pooling, indexing, views and
reshapes, softmax and norms, comparison/where, cat/stack; float32, and int64
and bool where the op takes them) run in a crash-isolated worker against eager
PyTorch.  The subset holds ops that pass today; ``make conformance`` sweeps all
of op_db.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "tools"))
import conformance  # noqa: E402

# Fewer compiled samples than this means lazymlir ran the subset eagerly.
MIN_COMPILED = 80


@pytest.fixture(scope="module")
def subset_results():
    ops = conformance.load_ops()
    limits = dict(conformance.SUBSET)
    ops_dtypes = {key: conformance.op_dtypes(ops[key]) for key in limits}
    return conformance.run_sweep(sorted(limits), limits, ops_dtypes, jobs=2, timeout=60)


def test_subset_equal_to_eager(subset_results):
    failures = {
        key: entry["failures"]
        for key, entry in subset_results.items()
        if any(entry["counts"][cls] for cls in conformance.FAILURES)
    }
    assert not failures, conformance.failing_ops(subset_results)
    for key, entry in subset_results.items():
        assert sum(entry["counts"][cls] for cls in conformance.EQUAL) > 0, key


def test_subset_compiled(subset_results):
    total = conformance.totals(subset_results)
    assert total["compiled-equal"] >= MIN_COMPILED, conformance.table(subset_results)


def test_torch_lazy_mark_step_routed():
    """OpInfo's wrapper_set_seed calls torch._lazy.mark_step() on lazy outputs."""
    import torch
    import torch._lazy

    import lazymlir

    saved = torch._lazy.mark_step, torch._lazy.wait_device_ops
    try:
        conformance.route_torch_lazy()
        x = torch.ones(3).to("lazy") + 1
        torch._lazy.mark_step()
        torch._lazy.wait_device_ops()
        assert lazymlir.metrics.counter_value("MarkStep") >= 1
        assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    finally:
        torch._lazy.mark_step, torch._lazy.wait_device_ops = saved
