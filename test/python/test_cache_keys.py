"""Issue 15, item 0: a cache hit must never reuse a graph compiled for inputs
that were merged by value.  Every lifted scalar and every leaf is a graph
input of its own, keyed by position, whatever values it had at the first
compile."""

import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import cache


def _close(lazy, eager):
    torch.testing.assert_close(lazy.cpu(), eager, rtol=1e-6, atol=1e-6)


def test_equal_scalars_at_first_compile_stay_separate_inputs(native_built, fresh_cache):
    x = torch.randn(64)
    for a, b in [(0.5, 0.5), (3.0, 7.0), (7.0, 3.0), (-2.0, -2.0)]:
        _close((x.to("lazy") + a) + b, (x + a) + b)
        _close((x.to("lazy") * a) * b, (x * a) * b)
        _close(torch.add(x.to("lazy"), x.to("lazy"), alpha=a) - b, torch.add(x, x, alpha=a) - b)
    s = cache.stats()
    assert s.entries == 3 and s.hits == 9, s  # one graph per expression, reused with new values
    assert_compiled()


def test_signed_zero_scalars(native_built, fresh_cache):
    x = torch.tensor([0.0, -0.0, 1.0])
    for a, b in [(0.0, 0.0), (-0.0, 0.0), (0.0, -0.0)]:
        lazy = ((x.to("lazy") * a) * b).cpu()
        assert torch.equal(torch.signbit(lazy), torch.signbit((x * a) * b)), (a, b)
    assert_compiled()


def test_tensors_aliasing_in_one_call_and_not_the_next(native_built, fresh_cache):
    def f(a, b):
        return a * 2 + b.sin()

    x, y = torch.randn(16), torch.randn(16)
    lx = x.to("lazy")
    _close(f(lx, lx), f(x, x))  # one leaf feeds both operands
    _close(f(x.to("lazy"), y.to("lazy")), f(x, y))  # two distinct leaves
    _close(f(lx, lx), f(x, x))
    lx2 = y.to("lazy")
    _close(f(lx2, lx2), f(y, y))  # the one-leaf graph again, new data
    assert cache.stats().entries == 2
    assert_compiled()


def test_views_of_one_tensor_as_two_operands(native_built, fresh_cache):
    x = torch.randn(8, 8)
    lx = x.to("lazy")
    _close(lx[:4] * 3.0 + lx[4:] * 5.0, x[:4] * 3.0 + x[4:] * 5.0)
    _close(lx.t() * 5.0 + lx * 3.0, x.t() * 5.0 + x * 3.0)
    y = torch.randn(8, 8)
    _close(y.to("lazy").t() * 2.0 + y.to("lazy") * 2.0, y.t() * 2.0 + y * 2.0)
    assert_compiled()


def test_learning_rate_schedule_whose_values_cross(native_built, fresh_cache):
    """Weight decay equal to the momentum when the steady-state step is first
    compiled (step 2), then lr and weight decay crossing each other: the lazy
    training must follow eager's."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    lazy_model = torch.nn.Linear(8, 4)
    lazy_model.load_state_dict(model.state_dict())
    lazy_model.to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1) for m in (model, lazy_model)]
    schedule = [(0.1, 0.9), (0.1, 0.9), (0.01, 0.1), (0.1, 0.01), (0.9, 0.05), (0.05, 0.9)]
    for lr, wd in schedule:
        x, y = torch.randn(16, 8), torch.randn(16, 4)
        for m, opt, dev in ((model, opts[0], "cpu"), (lazy_model, opts[1], "lazy")):
            for g in opt.param_groups:
                g["lr"], g["weight_decay"] = lr, wd
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
        lazymlir.mark_step()
    for p, q in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-6)
    assert_compiled()
