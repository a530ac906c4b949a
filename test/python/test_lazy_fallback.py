"""Never fail the user: ops the compiler cannot take run eagerly (aten:: counters),
graphs that fail to compile run eagerly with a warning, and both give eager's
answers."""

import os
import subprocess
import sys
import types

import pytest
import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import cache, metrics
from lazymlir.lowering import linalg, LoweringError
from lazymlir.execution import entries


def test_nonzero_falls_back(native_built):
    x = torch.tensor([[0.0, 1.5], [-2.0, 0.0], [3.0, 4.0]])
    lx = x.to("lazy")
    idx = torch.nonzero(lx * 2 > 1)  # data-dependent shape: eager
    out = (idx.float() + 1).sum(0)  # back on the lazy device, compiled
    torch.testing.assert_close(idx.cpu(), torch.nonzero(x * 2 > 1))
    torch.testing.assert_close(out.cpu(), (torch.nonzero(x * 2 > 1).float() + 1).sum(0))
    assert idx.device.type == "lazy"
    assert metrics.counter_value("aten::nonzero") == 1
    assert_compiled("aten::nonzero")


def test_nonzero_without_native():
    x = torch.randn(10)
    with lazymlir.config.patch(force_eager=True):
        got = torch.nonzero(x.to("lazy") > 0).cpu()
    torch.testing.assert_close(got, torch.nonzero(x > 0))
    assert metrics.executed_fallback_ops() == ["aten::nonzero"]


def test_unsupported_dtype_op_runs_eagerly():
    x = torch.randn(4) * 100
    h = x.to("lazy").to(torch.int16) * 2  # int16 is not a native dtype
    torch.testing.assert_close(h.cpu(), x.to(torch.int16) * 2)
    assert h.dtype == torch.int16
    assert any(n.startswith("aten::") for n in metrics.counter_names())


def test_lowering_failure_runs_eagerly_once(monkeypatch, fresh_cache):
    def broken(gm, example_inputs):
        raise LoweringError("simulated torch-mlir failure")

    monkeypatch.setattr(linalg, "lower", broken)
    x = torch.randn(5)
    with pytest.warns(RuntimeWarning, match="failed to compile"):
        got = (x.to("lazy").sin() * 3).cpu()
    torch.testing.assert_close(got, x.sin() * 3)
    again = (x.to("lazy").sin() * 3).cpu()  # the failure is cached: no retry, no warning
    torch.testing.assert_close(again, x.sin() * 3)
    assert metrics.counter_value("CompileFallback") == 2
    assert (cache.stats().misses, cache.stats().hits) == (1, 1)


def test_native_compile_error_runs_eagerly(monkeypatch, fresh_cache):
    class CompileError(RuntimeError):
        pass

    def compile_linalg(text, **options):
        raise CompileError("error: simulated native failure")

    real = entries.native_compiler()
    monkeypatch.setattr(entries, "_compiler", types.SimpleNamespace(**{**vars(real), "compile_linalg": compile_linalg}))
    monkeypatch.setattr(lazymlir.config, "cache_dir", None)  # a disk hit would compile nothing
    x = torch.randn(3, 3)
    with pytest.warns(RuntimeWarning, match="simulated native failure"):
        got = (x.to("lazy") @ x.to("lazy")).cpu()
    torch.testing.assert_close(got, x @ x)
    assert metrics.counter_value("CompileFallback") == 1
    assert metrics.counter_value("UncachedCompile") == 0


def test_op_that_cannot_lower_runs_eagerly_from_then_on(native_built, fresh_cache):
    """torch-mlir does not lower cummax: the first graph runs eagerly, the
    probe finds the op, and later traces run just that op eagerly and compile
    the rest."""
    x = torch.randn(6)
    with pytest.warns(RuntimeWarning, match="aten.cummax"):
        first = (torch.cummax(x.to("lazy") * 2, 0).values + 1).cpu()
    metrics.reset()
    second = (torch.cummax(x.to("lazy") * 2, 0).values + 1).cpu()
    expected = torch.cummax(x * 2, 0).values + 1
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(second, expected)
    assert_compiled("aten::cummax")


def test_an_op_that_cannot_lower_leaves_stderr_to_the_warning(native_built, fresh_cache, capfd):
    """torch-mlir does not lower cummin (its backend pipeline fails) nor
    cdist (its importer's pipeline fails): each runs eagerly with one
    warning; MLIR's diagnostics go into the LoweringError, not onto the
    user's stderr as 'error: failed to legalize ...'."""
    x = torch.randn(6)
    with pytest.warns(RuntimeWarning, match="aten.cummin"):
        got = (torch.cummin(x.to("lazy") * 2, 0).values + 1).cpu()
    torch.testing.assert_close(got, torch.cummin(x * 2, 0).values + 1)
    a, b = torch.randn(6, 4), torch.randn(5, 4)
    with pytest.warns(RuntimeWarning, match="_cdist_forward"):
        torch.testing.assert_close(torch.cdist(a.to("lazy"), b.to("lazy")).cpu(), torch.cdist(a, b))
    assert "error:" not in capfd.readouterr().err
    assert_compiled("aten::cummin", "aten::_cdist_forward")


def test_training_step_matches_eager():
    """Forward, backward and an SGD step on the lazy device (training proper is
    a later issue; this guards the functional rewriting of optimizer updates)."""
    import copy

    import torch.nn as nn
    import torch.nn.functional as F

    ref = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    lazy = copy.deepcopy(ref).to("lazy")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt_lazy = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
        opt_ref.zero_grad()
        loss = F.cross_entropy(ref(x), y)
        loss.backward()
        opt_ref.step()
        opt_lazy.zero_grad(set_to_none=True)
        lazy_loss = F.cross_entropy(lazy(x.to("lazy")), y.to("lazy"))
        lazy_loss.backward()
        opt_lazy.step()
        lazymlir.mark_step()
        assert lazy_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    for a, b in zip(ref.parameters(), lazy.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)


def test_training_with_dropout_matches_eager(native_built):
    """Dropout draws its mask from the CPU generator as eager does, without
    cutting the trace, so training on the lazy device follows eager's random
    stream; the compiled backward must agree with eager's."""
    import copy

    import torch.nn as nn
    import torch.nn.functional as F

    ref = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 5))
    lazy = copy.deepcopy(ref).to("lazy")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_lazy = torch.optim.SGD(lazy.parameters(), lr=0.1)
    data = [(torch.randn(8, 20), torch.randint(0, 5, (8,))) for _ in range(3)]
    torch.manual_seed(1)
    for x, y in data:
        opt_ref.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt_ref.step()
    torch.manual_seed(1)
    for x, y in data:
        opt_lazy.zero_grad(set_to_none=True)
        F.cross_entropy(lazy(x.to("lazy")), y.to("lazy")).backward()
        opt_lazy.step()
        lazymlir.mark_step()
    for a, b in zip(ref.parameters(), lazy.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a, rtol=1e-5, atol=1e-6)
    assert "aten::native_dropout" not in metrics.counter_names()


def test_op_that_cannot_lower_costs_one_op_not_the_graph(monkeypatch, native_built, fresh_cache):
    """The first graph holding an op that does not lower is split around it:
    the op runs eagerly in place, everything before and after it compiles
    (it used to run the whole graph eagerly)."""
    device = sys.modules["lazymlir.frontend.ops"]
    real = linalg.lower

    def lower(gm, example_inputs, **kwargs):
        if any(n.target is torch.ops.aten.sin.default for n in gm.graph.nodes):
            raise LoweringError("simulated: sin does not lower")
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(linalg, "lower", lower)
    sin = torch.ops.aten.sin.default
    try:
        x = torch.randn(64)
        with pytest.warns(RuntimeWarning, match="aten.sin"):
            got = ((x.to("lazy") * 2 + 1).sin() * 3 + 4).cpu()
        torch.testing.assert_close(got, (x * 2 + 1).sin() * 3 + 4)
        assert metrics.counter_value("CompileFallback") == 0
        assert metrics.counter_value("UncachedCompile") == 2  # before and after the sin
        assert metrics.executed_fallback_ops() == ["aten::sin"]
        metrics.reset()
        again = ((x.to("lazy") * 2 + 1).sin() * 3 + 4).cpu()  # from now on: sin eager at dispatch
        torch.testing.assert_close(again, got)
        assert_compiled("aten::sin")
    finally:
        device._forget_eager(sin)


def test_op_that_cannot_lower_for_one_dtype_still_compiles_for_others(monkeypatch, native_built, fresh_cache):
    """The probe marks an op with its inputs' dtypes: an op that does not
    lower on int64 still compiles on float32."""
    device = sys.modules["lazymlir.frontend.ops"]
    real = linalg.lower

    def lower(gm, example_inputs, **kwargs):
        if any(n.target is torch.ops.aten.neg.default for n in gm.graph.nodes) and any(
            t.dtype == torch.int64 for t in example_inputs
        ):
            raise LoweringError("simulated: integer neg does not lower")
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(linalg, "lower", lower)
    neg = torch.ops.aten.neg.default
    try:
        i = torch.arange(6)
        with pytest.warns(RuntimeWarning, match=r"aten.neg.default on \[torch.int64\]"):
            torch.testing.assert_close((-(i.to("lazy") * 2)).cpu(), -(i * 2))
        metrics.reset()
        x = torch.randn(6)
        torch.testing.assert_close((-(x.to("lazy") * 2)).cpu(), -(x * 2))
        assert_compiled()  # float32 neg compiled
        metrics.reset()
        torch.testing.assert_close((-(i.to("lazy") * 3)).cpu(), -(i * 3))
        assert_compiled("aten::neg")  # int64 neg eager at dispatch
    finally:
        device._forget_eager(neg)


def test_force_fallback_patch_applies_to_ops_seen_before(native_built, fresh_cache):
    """config.patch(force_fallback=...) takes effect for an op whose handler
    was cached by an earlier dispatch, and stops when the patch ends."""
    x = torch.randn(4, 4)
    (x.to("lazy").sin() + 1).cpu()  # aten::sin dispatched: its handler is cached
    metrics.reset()
    with lazymlir.config.patch(force_fallback="aten::sin"):
        got = (x.to("lazy").sin() + 1).cpu()
    torch.testing.assert_close(got, x.sin() + 1)
    assert metrics.counter_value("aten::sin") == 1, metrics.metrics_report()
    metrics.reset()
    (x.to("lazy").sin() + 1).cpu()
    assert metrics.counter_value("aten::sin") == 0, metrics.metrics_report()
    assert_compiled()


def test_unknown_target_device_is_an_error():
    with pytest.raises(ValueError, match="LAZYMLIR_DEVICE='cuda'"):
        with lazymlir.config.patch(device="cuda"):
            pass
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env["LAZYMLIR_DEVICE"] = "cuda"
    out = subprocess.run(
        [sys.executable, "-c", "import lazymlir"], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode != 0 and "is not a target lazymlir has" in out.stderr, out.stderr[-2000:]


def test_tracer_runs_without_loading_the_native_module():
    """The tracer, eager execution and metrics need no MLIR: the native module
    (libMLIR) loads at the first compile, not at import."""
    script = (
        "import sys, torch, lazymlir\n"
        "x = torch.randn(4, 4)\n"
        "y = (x.to('lazy') @ x.to('lazy')).relu().cpu()\n"
        "assert torch.allclose(y, (x @ x).relu())\n"
        "print('lazymlir._native' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env["LAZYMLIR_FORCE_EAGER"] = "1"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "False", (out.stdout, out.stderr[-2000:])
