"""The device's replay of a compiled step (csrc/Replay.cpp, run.replay): a
barrier, or a mark_step() waited for at once, whose graph was compiled and
run before is run from C++ without the Python path. Results must equal
eager's and the Python path's; anything the replay does not cover (a failed
run, an input a failed step should have computed, profiling, a cleared
cache) goes through the Python path, with its errors."""

import time

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import config, metrics
from lazymlir.execution import entries, run


@pytest.fixture
def at_once(monkeypatch):
    # "At once" widened: a loaded machine must not make these tests flaky.
    monkeypatch.setattr(run, "_AT_ONCE_S", 0.2)


def _python_runs(monkeypatch):
    """Counts the compiled runs that took the Python path (Compiled.run_into)."""
    ran = []
    run_into = entries.Compiled.run_into

    def spy(self, inputs, outs, background):
        ran.append(self.name)
        run_into(self, inputs, outs, background)

    monkeypatch.setattr(entries.Compiled, "run_into", spy)
    return ran


def test_mark_step_waited_for_at_once_is_replayed(native_built, at_once, monkeypatch):
    ran = _python_runs(monkeypatch)
    d = 256
    w, b = torch.randn(d), torch.randn(d)
    lw, lb = w.to("lazy"), b.to("lazy")
    for i in range(8):
        x = torch.randn(64, d)
        y = F.layer_norm(x.to("lazy"), (d,), lw, lb)
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        torch.testing.assert_close(y.cpu(), F.layer_norm(x, (d,), w, b))
    # Step 1 compiles, 2 runs checked, 3 is waited for at once twice before:
    # from then on mark_step() runs each step here, replayed.
    replays = metrics.counter_value("Replay")
    assert replays >= 5, metrics.metrics_report()
    assert len(ran) == 8 - replays
    assert metrics.counter_value("RunAtMarkStep") >= replays
    assert lazymlir.kernel_count() == lazymlir.kernel_count(y) is not None
    assert_compiled()


def test_replay_off(native_built, at_once):
    with config.patch(replay=False):
        x = torch.randn(100).to("lazy")
        for _ in range(6):
            y = x * 2
            lazymlir.mark_step()
            lazymlir.wait_device_ops()
    assert metrics.counter_value("Replay") == 0
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_replayed_training_with_a_changing_learning_rate(native_built, at_once):
    """Lifted scalars (the learning rate a scheduler changes every step)
    are the replay's inputs too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    lazy = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    lazy.load_state_dict(model.state_dict())
    lazy.to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, lazy)]
    scheds = [torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9) for o in opts]
    for step in range(10):
        x, t = torch.randn(8, 16), torch.randn(8, 4)
        for m, o, s, dev in ((model, opts[0], scheds[0], "cpu"), (lazy, opts[1], scheds[1], "lazy")):
            o.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(x.to(dev)), t.to(dev))
            loss.backward()
            o.step()
            s.step()
            if dev == "lazy":
                lazymlir.mark_step()
                lazymlir.wait_device_ops()
    assert metrics.counter_value("Replay") >= 5, metrics.metrics_report()
    for p, q in zip(model.parameters(), lazy.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-5)
    assert_compiled()


def test_reads_with_nothing_unfinished_are_replayed(native_built):
    """A barrier (``.item()``) with nothing running: a decode loop's read."""
    x = torch.randn(1000)
    lx = x.to("lazy")
    acc = torch.zeros(()).to("lazy")
    total = 0.0
    for i in range(8):
        acc = acc + (lx * (i + 1.0)).sum()  # a float: lifted, one graph
        total += (x * (i + 1)).sum().item()
        assert acc.item() == pytest.approx(total, rel=1e-5)
    assert metrics.counter_value("Replay") >= 5, metrics.metrics_report()
    assert_compiled()


def test_a_failed_runtime_check_in_a_replayed_step_raises_eagers_error(native_built, at_once):
    table = torch.randn(10, 4)
    lt = table.to("lazy")
    for i in range(6):
        ids = torch.tensor([i, 9 - i, 3])
        y = F.embedding(ids.to("lazy"), lt) * 2
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        torch.testing.assert_close(y.cpu(), F.embedding(ids, table) * 2)
    assert metrics.counter_value("Replay") >= 2, metrics.metrics_report()
    with pytest.raises(IndexError, match="index out of range"):
        F.embedding(torch.tensor([1, 10, 3]), table)
    y = F.embedding(torch.tensor([1, 10, 3]).to("lazy"), lt) * 2
    lazymlir.mark_step()
    with pytest.raises(IndexError, match="index out of range"):
        lazymlir.wait_device_ops()
    # The graph still serves good ids.
    y = F.embedding(torch.tensor([1, 2, 3]).to("lazy"), lt) * 2
    lazymlir.mark_step()
    lazymlir.wait_device_ops()
    torch.testing.assert_close(y.cpu(), table[[1, 2, 3]] * 2)


def test_an_input_a_failed_step_should_have_computed_is_not_replayed(native_built, at_once, monkeypatch):
    x = torch.randn(8).to("lazy")
    for _ in range(5):
        y = x.cos()
        z = y * 3  # noqa: F841  (its graph: y's value times 3, armed below)
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        z = y * 3
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
    replays = metrics.counter_value("Replay")
    assert replays >= 4, metrics.metrics_report()

    def broken(self, inputs, outs, background):
        raise ValueError("simulated failure")

    monkeypatch.setattr(entries.Compiled, "run_into", broken)
    y = x.sin() + 1  # a new graph: the Python path, which fails
    lazymlir.mark_step()
    with pytest.raises(ValueError, match="simulated failure"):
        lazymlir.wait_device_ops()
    monkeypatch.undo()
    monkeypatch.setattr(run, "_AT_ONCE_S", 0.2)
    z = y * 3  # the armed graph's fingerprint, on a value never computed
    lazymlir.mark_step()
    with pytest.raises(run.DependencyError):
        z.cpu()
    assert metrics.counter_value("Replay") == replays


def test_profiling_and_a_cleared_cache_take_the_python_path(native_built, at_once):
    x = torch.randn(100).to("lazy")

    def steps(n):
        for _ in range(n):
            y = (x + 1).relu()
            lazymlir.mark_step()
            lazymlir.wait_device_ops()
        return y

    steps(6)
    replays = metrics.counter_value("Replay")
    assert replays >= 3
    with lazymlir.profile() as prof:
        steps(4)
    assert metrics.counter_value("Replay") == replays
    assert prof.rows()
    lazymlir.cache.clear()
    compiles = metrics.counter_value("UncachedCompile")
    steps(1)
    assert metrics.counter_value("UncachedCompile") == compiles + 1  # not replayed from before the clear
    torch.testing.assert_close(steps(6).cpu(), (x.cpu() + 1).relu())
    assert metrics.counter_value("Replay") > replays


def test_reading_a_replayed_steps_value_at_once_keeps_replaying(native_built, at_once):
    """``mark_step(); loss.item()``: the read waits for the step at once as
    wait_device_ops() would, so every step after the first few is replayed."""
    x = torch.randn(64, 32)
    w = torch.randn(32, 32, requires_grad=True)
    lw = w.detach().to("lazy").requires_grad_()
    lx = x.to("lazy")
    for i in range(12):
        loss = (lx @ lw).tanh().sum()
        loss.backward()
        with torch.no_grad():
            lw -= 0.01 * lw.grad
        lw.grad = None
        lazymlir.mark_step()
        expected = (x @ w).tanh().sum()
        expected.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
        w.grad = None
        assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    assert metrics.counter_value("Replay") >= 12 - 5, metrics.metrics_report()
    torch.testing.assert_close(lw.detach().cpu(), w.detach(), rtol=1e-4, atol=1e-4)


def test_channels_last_training_is_replayed(native_built, at_once):
    """Inputs and outputs in channels_last (a memory format at the graph's
    boundary): inputs go in as their memory is, outputs come back as views
    in their memory format, as on the Python path."""
    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 4),
        ).to(memory_format=torch.channels_last)

    eager = net()
    lazy = net()
    lazy.load_state_dict(eager.state_dict())
    lazy.to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, lazy)]
    xs = [torch.randn(4, 3, 16, 16).to(memory_format=torch.channels_last) for _ in range(2)]
    ys = [torch.randint(0, 4, (4,)) for _ in range(2)]
    for i in range(10):
        losses = []
        for m, opt, dev in ((eager, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            loss = F.cross_entropy(m(xs[i % 2].to(dev)), ys[i % 2].to(dev))
            loss.backward()
            opt.step()
            if dev == "lazy":
                lazymlir.mark_step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-5)
    assert metrics.counter_value("Replay") >= 4, metrics.metrics_report()
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert q.stride() == p.stride()
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)
        assert q.detach().cpu().stride() == p.stride()
    torch.testing.assert_close(lazy[1].running_var.cpu(), eager[1].running_var, rtol=1e-4, atol=1e-5)
    assert_compiled()


def test_at_once_counts_the_callers_own_time(native_built):
    """ "At once" is the caller's own CPU time between mark_step() and its
    read, not the wall clock: a read delayed by something else (the worker
    taking the GIL as the step starts, a loaded host; a short sleep here)
    is at once, and the steps are replayed; a caller blocked past
    run._AT_ONCE_WALL_S (its data loader) used the overlap, and the steps go
    back to the worker."""
    x = torch.randn(64)
    lx = x.to("lazy")
    for i in range(8):
        y = lx * 2 + 1
        lazymlir.mark_step()
        time.sleep(0.001)  # blocked, not working (20x the old wall-clock limit)
        torch.testing.assert_close(y.cpu(), x * 2 + 1)
    assert metrics.counter_value("Replay") >= 3, metrics.metrics_report()
    replays, at_mark_step = metrics.counter_value("Replay"), metrics.counter_value("RunAtMarkStep")
    for i in range(4):
        y = lx * 2 + 1
        lazymlir.mark_step()
        time.sleep(run._AT_ONCE_WALL_S * 3)
        torch.testing.assert_close(y.cpu(), x * 2 + 1)
    # The first of these was still run at mark_step; none after it.
    assert metrics.counter_value("RunAtMarkStep") <= at_mark_step + 1, metrics.metrics_report()
    assert metrics.counter_value("Replay") <= replays + 1, metrics.metrics_report()
    assert_compiled()
