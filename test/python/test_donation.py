"""In-place state (issue 49, item 1): a step writes its new parameters,
gradients and optimizer moments into the buffers of the old values when
nothing else can read those (lazymlir.execution.donation), and keeps copy
semantics when something can. Every case is checked against eager, and the
buffers' addresses show whether the update was in place."""

import pytest
import torch
import torch.nn as nn

import lazymlir
from lazymlir import config, metrics
from lazymlir.frontend.tensor import state

import test_failed_steps as failed


def _buffer(t: torch.Tensor) -> int:
    """The address of the device data holding a lazy tensor's value."""
    lazymlir.wait_device_ops()
    return state(t).storage.base.data.data_ptr()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))


def _train(device, steps, read_every_step, hook=None):
    model = _mlp().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, capturable=device == "lazy")
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(16, 32, generator=g).to(device)
        y = torch.randn(16, 8, generator=g).to(device)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if device == "lazy":
            if read_every_step:
                loss.item()
            else:
                lazymlir.mark_step()
        if hook is not None:
            hook(step, model, opt)
    if device == "lazy":
        lazymlir.mark_step()
    return model, opt


def _assert_same(model, opt, ref, ref_opt):
    for (k, v), r in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(v.cpu(), r, msg=k)
    for p, rp in zip(model.parameters(), ref.parameters()):
        for k, v in opt.state[p].items():
            torch.testing.assert_close(v.cpu(), ref_opt.state[rp][k].to(v.dtype), msg=k)


@pytest.mark.parametrize("read_every_step", [True, False])
def test_adamw_steps_update_their_state_in_place(native_built, read_every_step):
    """Parameters and both moments stay in the same buffers from step to
    step (the step's graph writes into them), and the values are eager's."""
    addresses = []

    def hook(step, model, opt):
        if step >= 2:  # the moments exist from the first step on
            p = model[0].weight
            addresses.append((_buffer(p), _buffer(opt.state[p]["exp_avg"]), _buffer(opt.state[p]["exp_avg_sq"])))

    with config.patch(donate_min_bytes=0):
        model, opt = _train("lazy", 6, read_every_step, hook)
    ref, ref_opt = _train("cpu", 6, True)
    _assert_same(model, opt, ref, ref_opt)
    assert len(set(addresses)) == 1, addresses  # in place
    assert metrics.counter_value("DonatedBuffers") > 0
    assert metrics.counter_value("DonationCopies") == 0, metrics.metrics_report()
    assert metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile") > 0
    assert not [n for n in metrics.counter_names() if n.startswith("aten::")], metrics.metrics_report()


def test_a_graph_run_eagerly_updates_its_state_in_place(native_built, fresh_cache):
    """A graph that runs eagerly for good (here forced; a compile failure, an
    unsupported dtype) donates as a compiled one does: a training step that
    cannot compile holds its parameters and moments once (a 1024-wide MLP's
    step held 148 MiB of pool blocks at once, 16 MiB with donation, eager
    8 MiB), with eager's values, and a failed step still changes nothing."""
    addresses = []

    def hook(step, model, opt):
        if step >= 2:
            p = model[0].weight
            addresses.append((_buffer(p), _buffer(opt.state[p]["exp_avg"]), _buffer(opt.state[p]["exp_avg_sq"])))

    with config.patch(donate_min_bytes=0, force_eager=True):
        model, opt = _train("lazy", 6, False, hook)
    ref, ref_opt = _train("cpu", 6, True)
    _assert_same(model, opt, ref, ref_opt)
    assert len(set(addresses)) == 1, addresses  # in place
    assert metrics.counter_value("EagerGraph") > 0
    assert metrics.counter_value("DonatedBuffers") > 0
    assert metrics.counter_value("DonationCopies") == 0, metrics.metrics_report()


def _eager_graphs(monkeypatch):
    """The (FX module, donations) of every graph run eagerly from now on."""
    from lazymlir.execution import entries

    seen = []
    run_fx = entries.run_fx

    def spy(gm, inputs, outs, donated=()):
        seen.append((gm, tuple(donated)))
        return run_fx(gm, inputs, outs, donated)

    monkeypatch.setattr(entries, "run_fx", spy)
    return seen


def test_a_graph_run_eagerly_computes_into_its_buffers(native_built, fresh_cache, monkeypatch):
    """A step run eagerly writes each new value where it will live, as eager's
    in-place optimizer does: an op with an out= variant whose result is an
    output computes into the output's buffer (the donated parameter or
    moment), and a pointwise op writes over a temporary that dies with it.
    Without this an AdamW update, a dozen out-of-place ops per parameter, ran
    1.0 s slower at BERT-base (new tensors, their pages faulted in, copies)."""
    from lazymlir.execution import eager_fx

    seen = _eager_graphs(monkeypatch)
    with config.patch(donate_min_bytes=0, force_eager=True):
        model, opt = _train("lazy", 4, False)
    ref, ref_opt = _train("cpu", 4, True)
    _assert_same(model, opt, ref, ref_opt)
    gm, donated = seen[-1]
    assert donated
    code = eager_fx._into(gm, donated).graph
    targets = [n.target for n in code.nodes if n.op == "call_function"]
    outputs = len(list(gm.graph.nodes)[-1].args[0])
    into = targets.count(eager_fx._computed_into)
    overwritten = sum(1 for t in targets if getattr(t, "_schema", None) is not None and t._schema.is_mutable)
    # 4 parameters, each with 3 state outputs written by the op computing
    # them; every AdamW update writes over some of its own temporaries.
    assert into >= 12, code
    assert overwritten - targets.count(torch.ops.aten.copy_.default) >= 4 * 4, code
    assert targets.count(torch.ops.aten.copy_.default) < outputs - 12, code


def _viewed_temporary(x):
    a = x * 2  # a temporary (not an output of the graph) ...
    flat = a.view(-1)  # ... viewed; the view read after b
    b = a + 1
    return b * flat.view(48, 48).t()


def test_a_value_read_later_through_a_view_is_not_overwritten(native_built, monkeypatch):
    """A temporary whose view is read after an op is not written over by that
    op, and a donated input read transposed by the op computing its new value
    is not written while it is read: eager's values. (The transposed update
    also gives the next graph an input in a permuted layout, whose eager run
    once failed: its FX module had an op between its placeholders.)"""
    seen = _eager_graphs(monkeypatch)
    w0 = torch.randn(48, 48)
    x0 = torch.randn(48, 48)
    ys = []
    with config.patch(donate_min_bytes=0, force_eager=True):
        w = w0.to("lazy")
        x = x0.to("lazy")
        lazymlir.mark_step()
        for _ in range(2):
            ys.append(_viewed_temporary(x))
            w.add_(w.t())  # the new w from the old, read as it is and transposed
            lazymlir.mark_step()
    ref = w0
    for y in ys:
        torch.testing.assert_close(y.cpu(), _viewed_temporary(x0))
        ref = ref + ref.t()
    torch.testing.assert_close(w.cpu(), ref)
    assert any(d for _, d in seen)
    assert metrics.counter_value("DonatedBuffers") > 0


def test_below_the_threshold_nothing_is_donated(native_built):
    """The default threshold (16 MiB of updated state) leaves a small model's
    steps to the replay from C++, with copy semantics."""
    addresses = []

    def hook(step, model, opt):
        if step >= 2:
            addresses.append(_buffer(model[0].weight))

    model, opt = _train("lazy", 6, True, hook)
    ref, ref_opt = _train("cpu", 6, True)
    _assert_same(model, opt, ref, ref_opt)
    assert metrics.counter_value("DonatedBuffers") == 0
    assert metrics.counter_value("Replay") > 0
    assert len(set(addresses)) > 1


def test_a_tensor_sharing_the_old_value_keeps_it(native_built):
    """``snapshot.copy_(p)`` makes the snapshot's storage share p's value
    (no copy is recorded): the update of p must not be written into that
    buffer. So must a tensor kept from an earlier step that shares it."""
    w0 = torch.randn(64, 64)
    with config.patch(donate_min_bytes=0):
        p = w0.to("lazy")
        lazymlir.mark_step()
        snapshot = torch.empty_like(p)
        snapshot.copy_(p)
        for i in range(3):
            p.mul_(2).add_(1)
            lazymlir.mark_step()
        torch.testing.assert_close(snapshot.cpu(), w0)
        torch.testing.assert_close(p.cpu(), ((w0 * 2 + 1) * 2 + 1) * 2 + 1)
    assert metrics.counter_value("DonationCopies") >= 1
    assert metrics.counter_value("DonatedBuffers") >= 1  # once the snapshot no longer shares p's buffer


def test_a_view_and_an_alias_see_the_update(native_built):
    """Views and aliases of a storage updated in place read the new value,
    as in eager; a CPU copy taken before keeps the old one."""
    w0 = torch.randn(32, 32)
    with config.patch(donate_min_bytes=0):
        p = w0.to("lazy")
        lazymlir.mark_step()
        row = p[3]
        alias = p.detach()
        before = p.cpu()
        for _ in range(2):
            p.add_(p * 0.5)
            lazymlir.mark_step()
    torch.testing.assert_close(before, w0)
    torch.testing.assert_close(row.cpu(), (w0 * 1.5 * 1.5)[3])
    torch.testing.assert_close(alias.cpu(), w0 * 1.5 * 1.5)


def test_an_old_value_still_read_later_is_copied(native_built):
    """A step that returns the old value beside the new one (``old =
    p.clone()`` and an update of p, in one graph) gets both right."""
    w0 = torch.randn(256)
    with config.patch(donate_min_bytes=0):
        p = w0.to("lazy")
        lazymlir.mark_step()
        for _ in range(3):
            old = p.clone()
            p.sub_(old * 0.25)
            lazymlir.mark_step()
            torch.testing.assert_close(old.cpu(), p.cpu() / 0.75)
    torch.testing.assert_close(p.cpu(), w0 * 0.75**3)
    assert metrics.counter_value("DonatedBuffers") > 0


@pytest.mark.parametrize("bad", ["embedding", "cross_entropy"])
def test_a_failed_step_changes_nothing_with_donation(native_built, bad):
    """A runtime check that fails (an index out of range) leaves the donated
    buffers as they were (lazymlir-guard-donated-writes skips the writes),
    so the eager rerun raises eager's error and the state is given back."""
    batches = failed._batches(bad)
    expected, expected_moments, eager_raised = failed._eager_skipping(batches, "adamw", ())
    with config.patch(donate_min_bytes=0):
        got, moments, raised = failed._train("lazy", batches, "adamw", read_every_step=True)
    assert [(i, type(e), str(e)) for i, e in raised] == eager_raised
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], msg=k)
    for g, want in zip(moments, expected_moments):
        for k in want:
            torch.testing.assert_close(g[k], want[k].to(g[k].dtype), msg=k)
    assert metrics.counter_value("DonatedBuffers") > 0
    assert metrics.counter_value("DonationRefused") == 0  # compiled with its checks guarded
    assert metrics.counter_value("FailedStepGivenBack") >= 1


def test_a_failed_step_in_flight_with_donation(native_built):
    """mark_step() only: the failed step and the one traced on it are given
    back (their donated inputs were never written)."""
    batches = failed._batches("embedding")
    expected, _, eager_raised = failed._eager_skipping(batches, "sgd", (failed.BAD_STEP, failed.BAD_STEP + 1))
    with config.patch(donate_min_bytes=0):
        got, _, raised = failed._train("lazy", batches, "sgd", read_every_step=False)
    assert [i for i, _ in raised] == [failed.BAD_STEP + 1]
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], msg=k)
    assert metrics.counter_value("DonatedBuffers") > 0


def test_a_donating_graph_comes_back_from_disk(native_built, tmp_path):
    """A donating graph's trace record names the executable compiled with
    its donations: a process that finds it (here: the memory cache
    cleared) loads it without lowering, donates, and matches eager."""
    from lazymlir.execution import cache

    with config.patch(donate_min_bytes=0, cache_dir=str(tmp_path)):
        cache.clear()  # compiled here (earlier tests' graphs are in memory), records written there
        _train("lazy", 3, True)
        cache.clear()
        metrics.reset()
        model, opt = _train("lazy", 3, True)
    ref, ref_opt = _train("cpu", 3, True)
    _assert_same(model, opt, ref, ref_opt)
    assert cache.stats().disk_hits > 0
    assert not metrics.timing_samples("LoweringTime")
    assert metrics.counter_value("DonatedBuffers") > 0
