"""Large graphs compiled in a child process while they run eagerly
(lazymlir.execution.aside, config.compile_aside_ops): every run gives
eager's values, the compile starts at a graph's third run, the run after the
child finished is compiled code loaded from the disk cache, a crashing child
leaves the graph eager with a warning, and ops that do not lower run eagerly
with the rest compiled, as an in-process compile would have it."""

import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import config, metrics
from lazymlir.execution import aside, entries, run
from lazymlir.lowering import linalg


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.b(F.gelu(self.norm(self.a(x)))), dim=-1)


def _train(device, steps, after_step=None):
    torch.manual_seed(0)
    model = _Net().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(1)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(2)]
    losses = []
    for i in range(steps):
        x, y = (t.to(device) for t in data[i % 2])
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        lazymlir.mark_step()
        losses.append(loss.item())
        if after_step is not None:
            after_step(i)
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.fixture
def aside_cache(tmp_path, fresh_cache):
    # Every training graph goes aside; the donation of AdamW's state too.
    with config.patch(compile_aside_ops=20, cache_dir=str(tmp_path), donate_min_bytes=0):
        yield
    aside.wait_all()


def test_encoded_graph_lowers_to_the_same_linalg(native_built, fresh_cache):
    """A child lowers the graph it decodes: the same linalg as the graph
    the tracer built, for a training step (layer norm, GELU, log-softmax,
    AdamW: lifted scalars, getitem, dtypes the lowering reads)."""
    from lazymlir.trace import ir

    seen = []

    def listener(name, graph, text):
        gm = ir.to_fx(graph)
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype) for t in graph.input_values()]
        seen.append((text, linalg.lower(aside.decode(aside.encode(gm)), metas).linalg))

    entries.lowered_graph_listeners.append(listener)
    try:
        with config.patch(cache_dir=None, compile_aside_ops=0):
            _train("lazy", 2)
    finally:
        entries.lowered_graph_listeners.remove(listener)
    assert seen  # one graph: the first step's is the next steps' (fills.filled)
    for original, decoded in seen:
        assert decoded == original


def test_a_large_graph_runs_eagerly_then_compiled_from_its_child(native_built, aside_cache):
    want_losses, want_params = _train("cpu", 8)
    kernels = []

    def after_step(i):
        kernels.append(run.last_kernels)
        if i == 2:  # the step's graph (the first step's too) started its child at its third run
            assert metrics.counter_value("CompileAsideStarted") >= 1, metrics.metrics_report()
            lazymlir.cache.wait_background_compiles()

    losses, params = _train("lazy", 8, after_step)
    torch.testing.assert_close(losses, want_losses, rtol=1e-4, atol=1e-5)
    for got, want in zip(params, want_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # Steps 1-3 ran eagerly (no kernels), step 4 on: compiled code loaded
    # from what the child wrote.
    assert kernels[:3] == [None] * 3, kernels
    assert all(k is not None and k > 0 for k in kernels[3:]), kernels
    assert metrics.counter_value("EagerWhileCompiling") >= 3, metrics.metrics_report()
    assert metrics.counter_value("CompiledAside") >= 1, metrics.metrics_report()
    assert metrics.counter_value("CompileAsideFailed") == 0, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") == 0, metrics.metrics_report()
    assert aside._running is None or aside._running.finished()


def test_a_graph_run_once_is_never_compiled(native_built, aside_cache):
    torch.manual_seed(0)
    model = _Net()
    x = torch.randn(8, 16)
    want = model(x)
    with config.patch(compile_aside_ops=5):
        got = model.to("lazy")(x.to("lazy")).cpu()
    torch.testing.assert_close(got, want)
    assert metrics.counter_value("EagerWhileCompiling") == 1, metrics.metrics_report()
    assert metrics.counter_value("CompileAsideStarted") == 0, metrics.metrics_report()


def test_a_crashing_child_leaves_the_graph_eager_with_a_warning(native_built, aside_cache, monkeypatch):
    monkeypatch.setattr(aside, "command", lambda: [sys.executable, "-c", "import os; os.abort()"])
    want_losses, _ = _train("cpu", 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses, _ = _train("lazy", 6, lambda i: lazymlir.cache.wait_background_compiles())
    torch.testing.assert_close(losses, want_losses, rtol=1e-4, atol=1e-5)
    messages = [str(w.message) for w in caught]
    assert any("failed to compile and runs eagerly" in m and "exit status" in m for m in messages), messages
    assert metrics.counter_value("CompileAsideFailed") >= 1, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") >= 1, metrics.metrics_report()
    assert metrics.counter_value("CompiledAside") == 0, metrics.metrics_report()


def test_ops_that_do_not_lower_in_the_child_run_eagerly_and_the_rest_compiles(native_built, aside_cache):
    """avg_pool2d_backward with ceil_mode does not lower (test_unsupported_probe):
    the child's lowering fails, the parent finds the op, and from then on it
    runs eagerly while the rest of the graph compiles."""
    ops = sys.modules["lazymlir.frontend.ops"]
    op = torch.ops.aten.avg_pool2d_backward.default
    saved = ops._eager_dtypes.get(op)
    ops._forget_eager(op)

    def step(x, w):
        x = x.detach().requires_grad_()
        y = F.avg_pool2d(x * w, 2, 2, ceil_mode=True)
        (y * y).sum().backward()
        return y, x.grad

    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 7, 5), torch.randn(5)
    want = step(x, w)
    try:
        with config.patch(compile_aside_ops=5), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):
                got = step(x.to("lazy"), w.to("lazy"))
                lazymlir.mark_step()
                torch.testing.assert_close(got[0].cpu(), want[0])
                torch.testing.assert_close(got[1].cpu(), want[1])
                lazymlir.cache.wait_background_compiles()
        messages = [str(w.message) for w in caught]
        assert any("aten.avg_pool2d_backward.default" in m and "the rest compiles" in m for m in messages), messages
        assert metrics.counter_value("CompileAsideFailed") >= 1, metrics.metrics_report()
        assert metrics.counter_value("aten::avg_pool2d_backward") >= 1, metrics.metrics_report()
    finally:
        ops._forget_eager(op)
        if saved is not None:
            ops._eager_dtypes[op] = saved


def test_no_child_outlives_the_process(native_built, tmp_path):
    """A child still compiling when the process exits is stopped."""
    import subprocess

    script = f"""
import os, time, torch, lazymlir
from lazymlir import config
from lazymlir.execution import aside
config.compile_aside_ops = 1
config.cache_dir = {str(tmp_path)!r}
m = torch.nn.Linear(8, 8).to("lazy")
with torch.no_grad():
    for _ in range(3):  # the child starts at the third run
        m(torch.randn(4, 8).to("lazy")).sum().item()
assert aside._running is not None
print(aside._running.proc.pid, flush=True)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    pid = int(out.stdout.split()[-1])
    try:
        os.kill(pid, 0)
        alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive


def _fx(fn):
    """``fn``'s aten graph, returning a tuple as the tracer's graphs do."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(torch.randn(4, 3), torch.randn(4, 3))


@pytest.mark.parametrize(
    "fn, donated",
    [
        # The donated input is read after its new value is computed: the
        # write waits for the last read.
        (lambda a, b: (a * 2, (a + b).sum(), b - 1), ((0, 0), (1, 2))),
        # An output is a view of a donated input: written at the end, from
        # a copy of the view.
        (lambda a, b: (a + b, a.t(), b.view(-1)), ((0, 0),)),
        # Two donated inputs swapped.
        (lambda a, b: (b.clone(), a.clone()), ((0, 0), (1, 1))),
        (lambda a, b: (b * 1, a.view(4, 3)), ((0, 0), (1, 1))),
    ],
)
def test_eager_runs_write_each_output_when_computed_and_donated_ones_after_their_last_read(fn, donated):
    """entries.run_fx: every output buffer gets the value eager computes,
    when a donated output's buffer is its input's own."""
    gm = _fx(fn)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    want = fn(a.clone(), b.clone())
    inputs = [a, b]
    outs = [torch.empty_like(w) for w in want]
    for i, j in donated:
        if outs[j].shape == inputs[i].shape:
            outs[j] = inputs[i]
    entries.run_fx(gm, inputs, outs, donated)
    for got, w in zip(outs, want):
        torch.testing.assert_close(got, w)


def test_a_child_whose_graph_was_forgotten_leaves_no_files(native_built, aside_cache):
    """lazymlir.cache.clear() while a child compiles: it still fills the disk
    cache, and its job and result files go once it has finished."""
    _train("lazy", 3)
    job = aside._running
    assert job is not None, metrics.metrics_report()
    lazymlir.cache.clear()
    aside.wait_all()
    assert aside._running is None
    assert not os.path.exists(job.job_path) and not os.path.exists(job.result_path)
