"""The fast subset of the OpInfo conformance sweep (``tools/conformance.py``).

A few samples of each op family (``conformance.SUBSET``: elementwise unary and
binary, reductions, matmul/linear, conv and pooling, indexing, views and
reshapes, softmax and norms, comparison/where, cat/stack; float32, and int64
and bool where the op takes them; bfloat16 and float16 for
``conformance.SUBSET_LOW_PRECISION``, one or two ops of each family) run in a
crash-isolated worker against eager PyTorch.  The subset holds ops that pass today; ``make conformance`` sweeps all
of op_db.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "tools"))
import conformance  # noqa: E402

# Fewer compiled samples than this means lazymlir ran the subset eagerly.
MIN_COMPILED = 80
# Per low-precision dtype: lazymlir computes each op in float32 and rounds
# once, so these compile (a host that cannot convert to bf16 falls back).
MIN_COMPILED_LOW = 10


@pytest.fixture(scope="module")
def subset_results():
    ops = conformance.load_ops()
    limits = dict(conformance.SUBSET)
    ops_dtypes = conformance.subset_dtypes(ops)
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


@pytest.mark.parametrize("dtype", conformance.LOW_PRECISION_DTYPES)
def test_subset_low_precision(subset_results, dtype):
    """The subset's bfloat16 and float16 samples ran, equal to eager at the
    dtype's tolerance, and compiled."""
    part = conformance.restrict(subset_results, (dtype,))
    assert set(part) == set(conformance.SUBSET_LOW_PRECISION), conformance.dtype_table(subset_results)
    total = conformance.totals(part)
    assert not any(total[cls] for cls in conformance.FAILURES), conformance.failing_ops(part)
    assert total["compiled-equal"] >= MIN_COMPILED_LOW, conformance.dtype_table(subset_results)


def test_tolerance_per_dtype():
    """OpInfo tolerances as PyTorch's tests take them: a CPU override for the
    dtype, at least assert_close's default; none: the defaults."""
    import torch

    ops = conformance.load_ops()
    assert conformance.tolerance(ops["add"], torch.bfloat16) == {}
    # silu's bfloat16 override is CUDA's
    assert conformance.tolerance(ops["nn.functional.silu"], torch.bfloat16) == {}
    # log: precisionOverride({bfloat16: 5e-2}), an atol
    assert conformance.tolerance(ops["log"], torch.bfloat16) == {"atol": 5e-2, "rtol": 1.6e-2}
    assert conformance.tolerance(ops["addbmm"], torch.bfloat16) == {"atol": 0.2, "rtol": 0.6}


def test_restrict_and_dtype_table():
    """Per-dtype totals: restrict keeps one dtype's counts and failures; a
    baseline without by_dtype counts as the baseline's dtypes."""
    import collections

    results = {
        "a": {
            "counts": collections.Counter({"compiled-equal": 2, "mismatch": 1}),
            "by_dtype": {
                "float32": collections.Counter({"compiled-equal": 1}),
                "bfloat16": collections.Counter({"compiled-equal": 1, "mismatch": 1}),
            },
            "failures": [["bfloat16", 2, "mismatch", "x"]],
            "fallbacks": [],
        }
    }
    low = conformance.restrict(results, ("bfloat16",))
    assert low["a"]["counts"] == {"compiled-equal": 1, "mismatch": 1} and low["a"]["failures"]
    f32 = conformance.restrict(results, ("float32",))
    assert f32["a"]["counts"] == {"compiled-equal": 1} and not f32["a"]["failures"]
    assert conformance.restrict(results, ("float16",)) == {}
    assert "| bfloat16 | 1 | 2 | 1 | 1 | 0 | 0 | 1 |" in conformance.dtype_table(results)
    old = {"a": {"counts": collections.Counter({"compiled-equal": 3}), "failures": [], "fallbacks": []}}
    assert conformance.restrict(old, conformance.BASELINE_DTYPES)["a"]["counts"]["compiled-equal"] == 3
    assert conformance.restrict(old, conformance.LOW_PRECISION_DTYPES) == {}


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
