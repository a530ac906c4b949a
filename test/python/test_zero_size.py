"""Issue 15, item 4: tensors with a zero-size dimension give eager's results.
Compiled code used to crash on them (SIGSEGV in a contraction with an empty
inner dimension, SIGFPE dividing by an empty extent) or the runtime rejected
them; now ops whose outputs are all empty produce empty tensors without
running anything, and ops with empty inputs but non-empty outputs (sums,
variances, contractions over an empty dimension) run eagerly without syncing
anything.  The cases run in a child process: a crash is a failed test."""

import json
import subprocess
import sys

import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics

_CASES = {
    "mm": lambda d: torch.mm(d(torch.randn(5, 0)), d(torch.randn(0, 10))),
    "matmul": lambda d: torch.matmul(d(torch.randn(5, 0)), d(torch.randn(0, 10))),
    "addmm": lambda d: torch.addmm(d(torch.randn(5, 10)), d(torch.randn(5, 0)), d(torch.randn(0, 10))),
    "rmatmul": lambda d: d(torch.randn(0, 10)).__rmatmul__(d(torch.randn(5, 0))),
    "multi_dot": lambda d: torch.linalg.multi_dot([d(torch.randn(5, 0)), d(torch.randn(0, 4)), d(torch.randn(4, 3))]),
    "pinv": lambda d: torch.linalg.pinv(d(torch.randn(3, 0))),
    "unfold": lambda d: F.unfold(d(torch.randn(0, 1, 5, 5)), 2),
    "bilinear": lambda d: F.bilinear(
        d(torch.randn(0, 3)), d(torch.randn(0, 4)), d(torch.randn(2, 3, 4)), d(torch.randn(2))
    ),
    "repeat": lambda d: d(torch.randn(0)).repeat(3),
    "repeat_to_empty": lambda d: d(torch.randn(3)).repeat(0),
    "pixel_shuffle": lambda d: F.pixel_shuffle(d(torch.randn(1, 0, 1, 1)), 1),
    "pixel_unshuffle": lambda d: F.pixel_unshuffle(d(torch.randn(1, 0, 1, 1)), 1),
    "flip": lambda d: d(torch.randn(0, 3)).flip(0),
    "zeros_like": lambda d: torch.zeros_like(d(torch.randn(0, 3))),
    "ones_like": lambda d: torch.ones_like(d(torch.randn(2, 0))),
    "new_empty": lambda d: d(torch.randn(2)).new_empty((0,)),
    "tile": lambda d: d(torch.randn(0, 3)).tile(2),
    "var": lambda d: d(torch.randn(0, 5)).var(0),
    "std": lambda d: d(torch.randn(0, 5)).std(),
    "sum": lambda d: d(torch.randn(0, 5)).sum(0),
    "mean": lambda d: d(torch.randn(0, 5)).mean(),
    "prod": lambda d: d(torch.randn(5, 0)).prod(1),
    "softmax": lambda d: d(torch.randn(0, 5)).softmax(-1),
    "cat": lambda d: torch.cat([d(torch.randn(0, 5)), d(torch.ones(2, 5))]) * 2,
    "empty_plus_one": lambda d: torch.empty(0, 4, device=d(torch.empty(0)).device) + 1,
    "slice_then_sum": lambda d: (d(torch.ones(4, 5)) * 2)[:, :0].sum(1),
    "inplace": lambda d: d(torch.randn(0, 3)).add_(1),
    "trace": lambda d: torch.trace(d(torch.randn(0, 0))),
    "conv_batch0": lambda d: F.conv2d(d(torch.randn(0, 2, 5, 5)), d(torch.randn(3, 2, 3, 3))),
    "linear_batch0": lambda d: F.linear(d(torch.randn(0, 4)), d(torch.randn(3, 4)), d(torch.randn(3))),
}


def _run(names):
    """In this process: each case on CPU and on the lazy device, results as
    {name: "ok" | "mismatch: ..." | "error: ..."}; prints each name first so a
    crash names its case."""
    results = {}
    for name in names:
        print("RUNNING", name, flush=True)
        try:
            torch.manual_seed(0)
            eager = _CASES[name](lambda t: t)
            torch.manual_seed(0)
            lazy = _CASES[name](lambda t: t.to("lazy")).cpu()
            same = (
                eager.shape == lazy.shape and eager.dtype == lazy.dtype and torch.allclose(eager, lazy, equal_nan=True)
            )
            results[name] = "ok" if same else f"mismatch: {eager} vs {lazy}"
        except Exception as e:  # reported, not raised: the parent compares
            results[name] = f"error: {type(e).__name__}: {e}"
    return results


def test_zero_size_ops_match_eager():
    code = (
        "import sys, json; sys.path.insert(0, %r); import test_zero_size as t; "
        "print('RESULT', json.dumps(t._run(list(t._CASES))))" % __file__.rsplit("/", 1)[0]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, (
        f"crashed (exit {out.returncode}) in {lines[-1] if lines else '?'}: {out.stderr[-2000:]}"
    )
    results = json.loads(next(line for line in lines if line.startswith("RESULT "))[len("RESULT ") :])
    bad = {k: v for k, v in results.items() if v != "ok"}
    assert not bad, bad


def test_zero_size_ops_leave_the_rest_compiled(native_built):
    """An empty tensor in a step does not make the step's other work eager."""
    x = torch.randn(8, 16)
    lx = x.to("lazy")
    empty = lx[:0]
    out = (lx.sin() * 2 + empty.sum(0)).cpu()  # sum over an empty dim: zeros, broadcast
    torch.testing.assert_close(out, x.sin() * 2)
    assert metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile") > 0
    assert metrics.counter_value("ZeroSizeGraph") == 0
    lazymlir.mark_step()
    metrics.reset()
    torch.testing.assert_close((lx.cos() + (empty * 3).sum()).cpu(), x.cos())
    assert_compiled("aten::sum")  # the empty sum ran eagerly, the rest compiled
