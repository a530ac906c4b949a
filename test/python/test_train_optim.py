"""Training on the lazy device against eager: forward, backward and optimizer
step recorded and compiled as one graph per mark_step(); parameters after a few
steps match eager's within float32 tolerance."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import cache, metrics


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


OPTIMIZERS = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach),
    "sgd_nesterov_wd": lambda params, foreach: torch.optim.SGD(
        params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2, foreach=foreach
    ),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, foreach=foreach),
    "adam_amsgrad": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, amsgrad=True, foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=foreach),
    "adadelta": lambda params, foreach: torch.optim.Adadelta(params, lr=1.0, foreach=foreach),
}


def _batches(n, batch=8):
    return [(torch.randn(batch, 20), torch.randint(0, 5, (batch,))) for _ in range(n)]


def train(model, opt, batches, device, set_to_none=True, scheduler=None):
    """The tutorial's loop; returns the losses (read after each step)."""
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=set_to_none)
        loss = F.nll_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
        if device == "lazy":
            lazymlir.mark_step()
        losses.append(loss.item())
    return losses


def assert_same_params(ref, lazy, rtol=1e-5, atol=1e-6):
    for (name, a), b in zip(ref.named_parameters(), lazy.parameters()):
        assert b.device.type == "lazy"
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=rtol, atol=atol, msg=name)


def assert_one_graph_per_step(steps):
    """Each step ran as exactly one graph (the mark_step), compiled."""
    assert metrics.counter_value("MarkStep") == steps
    assert metrics.counter_value("Sync") == steps, metrics.metrics_report()
    assert metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile") == steps
    assert_compiled()


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_eager(native_built, fresh_cache, name, foreach):
    ref = MLP()
    lazy = copy.deepcopy(ref).to("lazy")
    batches = _batches(3)
    ref_losses = train(ref, OPTIMIZERS[name](ref.parameters(), foreach), batches, "cpu")
    lazy_opt = OPTIMIZERS[name](lazy.parameters(), foreach)
    metrics.reset()
    lazy_losses = train(lazy, lazy_opt, batches, "lazy")
    assert lazy_losses == pytest.approx(ref_losses, rel=1e-5)
    assert_same_params(ref, lazy)
    assert_one_graph_per_step(3)
    # Step-dependent floats (Adam's bias corrections) are graph inputs, and
    # state made by zeros_like gets its zeros when the first step writes it
    # (fills.filled): every step is one graph. SGD's first step makes its
    # momentum from the gradient (a graph of its own), the second compiles.
    compiles = 2 if name.startswith("sgd") else 1
    assert metrics.counter_value("UncachedCompile") == compiles, metrics.metrics_report()
    for state in lazy_opt.state.values():  # optimizer state lives on the lazy device too
        for k, v in state.items():
            if isinstance(v, torch.Tensor) and k != "step":
                assert v.device.type == "lazy", k


@pytest.mark.parametrize("set_to_none", [True, False])
def test_grads_and_zero_grad(native_built, set_to_none):
    ref = MLP()
    lazy = copy.deepcopy(ref).to("lazy")
    batches = _batches(3)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    train(ref, ref_opt, batches, "cpu", set_to_none)
    metrics.reset()
    train(lazy, lazy_opt, batches, "lazy", set_to_none)
    assert_same_params(ref, lazy)
    for a, b in zip(ref.parameters(), lazy.parameters()):
        assert b.grad is not None and b.grad.device.type == "lazy"
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-7)
    assert_one_graph_per_step(3)
    ref_opt.zero_grad(set_to_none=set_to_none)
    lazy_opt.zero_grad(set_to_none=set_to_none)
    for a, b in zip(ref.parameters(), lazy.parameters()):
        if set_to_none:
            assert b.grad is None
        else:
            assert b.grad.device.type == "lazy" and not b.grad.cpu().any()


def test_grad_accumulation(native_built):
    """Two backward passes before a step: gradients add up in .grad."""
    ref = MLP()
    lazy = copy.deepcopy(ref).to("lazy")
    (x1, y1), (x2, y2) = _batches(2)
    for model, dev in ((ref, "cpu"), (lazy, "lazy")):
        F.nll_loss(model(x1.to(dev)), y1.to(dev)).backward()
        F.nll_loss(model(x2.to(dev)), y2.to(dev)).backward()
    lazymlir.mark_step()
    for a, b in zip(ref.parameters(), lazy.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-7)
    assert_compiled()


def test_step_lr(native_built, fresh_cache):
    ref = MLP()
    lazy = copy.deepcopy(ref).to("lazy")
    batches = _batches(6)
    ref_opt = torch.optim.Adadelta(ref.parameters(), lr=1.0)
    lazy_opt = torch.optim.Adadelta(lazy.parameters(), lr=1.0)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.7)
    lazy_sched = torch.optim.lr_scheduler.StepLR(lazy_opt, step_size=2, gamma=0.7)
    train(ref, ref_opt, batches, "cpu", scheduler=ref_sched)
    metrics.reset()
    train(lazy, lazy_opt, batches, "lazy", scheduler=lazy_sched)
    assert lazy_opt.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"])
    assert lazy_sched.get_last_lr() == pytest.approx(ref_sched.get_last_lr())
    assert_same_params(ref, lazy)
    assert_one_graph_per_step(6)
    # The learning rate is a graph input (a lifted scalar), not a constant:
    # one graph (the first step's too: its zeros_like state is data) for the 3
    # learning rates.
    assert metrics.counter_value("UncachedCompile") == 1, metrics.metrics_report()


def test_cache_one_compile_per_step_shape_over_an_epoch(native_built, fresh_cache):
    """An epoch of 20 batches of 16 plus a last partial batch of 5: the step
    (the first one too: it creates the optimizer state with zeros_like, which
    the step then updates as data) and the partial batch compile; every other
    step hits the cache."""
    torch.manual_seed(0)
    data = torch.randn(325, 20)
    target = torch.randint(0, 5, (325,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, target), batch_size=16)
    model = MLP().to("lazy")
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    metrics.reset()
    for x, y in loader:
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x.to("lazy")), y.to("lazy"))
        loss.backward()
        opt.step()
        lazymlir.mark_step()
    lazymlir.wait_device_ops()
    steps = len(loader)
    assert steps == 21
    s = cache.stats()
    assert (s.misses, s.hits, s.entries) == (2, steps - 2, 2), s
    assert metrics.counter_value("RecompileShapeChange") == 1  # the partial batch
    assert_one_graph_per_step(steps)


def test_clip_grad_norm(native_built):
    """clip_grad_norm_ (per-tensor norms, stack, clamp, mul_) stays in the step's graph."""
    ref = MLP()
    lazy = copy.deepcopy(ref).to("lazy")
    batches = _batches(2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    metrics.reset()
    for model, opt, dev in ((ref, ref_opt, "cpu"), (lazy, lazy_opt, "lazy")):
        for x, y in batches:
            opt.zero_grad()
            F.nll_loss(model(x.to(dev)), y.to(dev)).backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
            if dev == "lazy":
                lazymlir.mark_step()
    assert_same_params(ref, lazy)
    assert norm.device.type == "lazy"
    assert_one_graph_per_step(2)


FOREACH_CALLS = {
    "add_.Scalar": lambda ts, us: torch._foreach_add_(ts, 0.5),
    "add_.List": lambda ts, us: torch._foreach_add_(ts, us, alpha=-0.25),
    "mul_.ScalarList": lambda ts, us: torch._foreach_mul_(ts, [0.5 + i for i in range(len(ts))]),
    "addcdiv_.ScalarList": lambda ts, us: torch._foreach_addcdiv_(ts, us, us, [-0.1 * (i + 1) for i in range(len(ts))]),
    "addcmul_.Scalar": lambda ts, us: torch._foreach_addcmul_(ts, us, us, value=2.0),
    "lerp_.Scalar": lambda ts, us: torch._foreach_lerp_(ts, us, 0.1),
    "sqrt": lambda ts, us: torch._foreach_sqrt([t.abs() for t in ts]),
    "add.Tensor": lambda ts, us: torch._foreach_add(ts, us[0].sum(), alpha=3),
    "maximum_.List": lambda ts, us: torch._foreach_maximum_(ts, us),  # no maximum_: written back
    "norm.Scalar": lambda ts, us: torch._foreach_norm(ts, 2),
}
PLANNED = {
    "add_.Scalar",
    "add_.List",
    "mul_.ScalarList",
    "addcdiv_.ScalarList",
    "addcmul_.Scalar",
    "lerp_.Scalar",
    "sqrt",
    "add.Tensor",
    "norm.Scalar",
}


@pytest.mark.parametrize("name", sorted(FOREACH_CALLS))
def test_foreach_ops_run_their_elements_from_cpp(native_built, name):
    """A foreach op's first call picks the per-element overload (Python's
    argument parser) and hands the loop to C++: later calls record the same
    ops without a Python frame per element. Values equal eager's, every
    call; ops with no per-element in-place form (written back) and norms
    stay in Python."""
    base, _, overload = name.partition(".")
    func = getattr(getattr(torch.ops.aten, "_foreach_" + base), overload or "default")
    for step in range(3):
        ts = [torch.randn(3, 4) for _ in range(3)] + [torch.randn(5)]
        us = [torch.randn_like(t) for t in ts]
        ref_ts = [t.clone() for t in ts]
        ref = FOREACH_CALLS[name](ref_ts, us)
        lts = [t.to("lazy") for t in ts]
        out = FOREACH_CALLS[name](lts, [u.to("lazy") for u in us])
        lazymlir.mark_step()
        for got, want in zip(lts, ref_ts):
            torch.testing.assert_close(got.cpu(), want)
        if ref is not None:
            assert len(out) == len(ref)
            for got, want in zip(out, ref):
                torch.testing.assert_close(got.cpu(), want)
        assert lazymlir._device.foreach_planned(func) == (name in PLANNED)
    assert_compiled()


def test_a_foreach_plan_holds_for_the_arguments_it_was_made_with(native_built):
    """The plan of `_foreach_norm` made with the default ord (2) reads no ord:
    a call with another ord (or a dtype) goes to Python, which computes it."""
    ts = [torch.randn(6), torch.randn(2, 3)]
    lts = [t.to("lazy") for t in ts]
    for _ in range(2):
        for args in ((), (1,), (2,), (float("inf"),), (2, torch.float64)):
            got = torch._foreach_norm(lts, *args)
            for g, w in zip(got, torch._foreach_norm(ts, *args)):
                torch.testing.assert_close(g.cpu(), w)
    assert lazymlir._device.foreach_planned(torch.ops.aten._foreach_norm.Scalar)
