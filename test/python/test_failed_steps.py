"""A step that fails changes nothing (issue 47, item 1).

A training step whose data is bad (an embedding index, a gather index or a
cross-entropy target out of range) fails when its graph runs. Eager raises
at the op and leaves the model, its gradients and the optimizer's state as
they were; the lazy device must do the same: every tensor the failed step
would have written keeps its value, the barrier raises eager's exception
(with a note naming the op), and the next steps train on, ending with the
parameters of an eager run that skipped the bad batch.

With ``mark_step()`` only (nothing read), the failure is known when the
next ``mark_step()`` waits for the failed step (config.max_in_flight): that
call raises it, and the step it was cutting, traced on the failed step's
values, is given back too. Eager's reference then skips both batches.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazymlir
from lazymlir import metrics
from lazymlir.execution import errors

VOCAB, LENGTH, CLASSES, DIM = 10, 6, 5, 8
BAD_STEP, STEPS = 3, 6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.lin = nn.Linear(DIM, CLASSES)

    def forward(self, ids, where, target):
        h = self.emb(ids)  # (B, L, D)
        h = torch.gather(h, 1, where)  # (B, K, D)
        return F.cross_entropy(self.lin(h.mean(1)), target)


def _batches(bad: str):
    g = torch.Generator().manual_seed(1)
    batches = []
    for i in range(STEPS):
        ids = torch.randint(0, VOCAB, (4, LENGTH), generator=g)
        where = torch.randint(0, LENGTH, (4, 3, DIM), generator=g)
        target = torch.randint(0, CLASSES, (4,), generator=g)
        if i == BAD_STEP:
            if bad == "embedding":
                ids[1, 2] = VOCAB + 3
            elif bad == "gather":
                where[2, 1, 0] = LENGTH + 1
            else:
                target[3] = CLASSES
        batches.append((ids, where, target))
    return batches


def _batches_error(bad):
    return RuntimeError if bad == "gather" else IndexError


def _optimizer(kind, params, device):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    # capturable on the lazy device: the step count is a tensor on the
    # model's device. Otherwise it is a CPU tensor, which the failed step's
    # optimizer.step() advanced eagerly (eager's CPU run never gets there).
    return torch.optim.AdamW(params, lr=0.05, capturable=device == "lazy")


def _train(device, batches, kind, read_every_step, skip=()):
    torch.manual_seed(0)
    model = Net().to(device)
    opt = _optimizer(kind, model.parameters(), device)
    raised = []
    for i, (ids, where, target) in enumerate(batches):
        if i in skip:
            continue
        try:
            opt.zero_grad()
            loss = model(ids.to(device), where.to(device), target.to(device))
            loss.backward()
            opt.step()
            if device == "lazy":
                if read_every_step:
                    loss.item()
                else:
                    lazymlir.mark_step()
        except (IndexError, RuntimeError) as e:  # eager's gather raises RuntimeError
            raised.append((i, e))
    if device == "lazy":
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    moments = [
        {k: v.cpu() for k, v in s.items() if isinstance(v, torch.Tensor)}
        for s in (opt.state[p] for p in model.parameters())
    ]
    return state, moments, raised


def _eager_skipping(batches, kind, skip):
    """Eager's run where the bad batch raises at its op (and ``skip``'s
    batches are left out)."""
    state, moments, raised = _train("cpu", batches, kind, True, skip)
    return state, moments, [(i, type(e), str(e)) for i, e in raised]


@pytest.mark.parametrize("bad", ["embedding", "gather", "cross_entropy"])
@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_a_failed_step_read_at_once_changes_nothing(native_built, bad, kind):
    batches = _batches(bad)
    expected, expected_moments, eager_raised = _eager_skipping(batches, kind, ())
    assert [i for i, _, _ in eager_raised] == [BAD_STEP]
    compiles = metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")
    replays = metrics.counter_value("Replay")
    state, moments, raised = _train("lazy", batches, kind, read_every_step=True)
    assert [(i, type(e), str(e)) for i, e in raised] == eager_raised  # eager's type and message
    notes = "\n".join(getattr(raised[0][1], "__notes__", []))
    assert "raised by aten." in notes, notes  # the op is named
    for k in expected:
        torch.testing.assert_close(state[k], expected[k], msg=k)
    for got, want in zip(moments, expected_moments):
        for k in want:
            torch.testing.assert_close(got[k], want[k].to(got[k].dtype), msg=k)
    # compiled, not run eagerly
    assert (
        metrics.counter_value("UncachedCompile")
        + metrics.counter_value("CachedCompile")
        + metrics.counter_value("Replay")
        > compiles + replays
    )
    assert not [n for n in metrics.counter_names() if n.startswith("aten::")], metrics.metrics_report()
    assert metrics.counter_value("FailedStepGivenBack") >= 1


@pytest.mark.parametrize("bad", ["embedding", "cross_entropy"])
def test_a_failed_step_with_mark_step_only_surfaces_at_the_next_mark_step(native_built, bad):
    """The failure surfaces one step later, at the next mark_step(): that
    call raises the failed step's IndexError, and the step it cut (traced on
    the failed step's values) is not applied either. The parameters then
    equal eager's run without those two batches."""
    batches = _batches(bad)
    expected, expected_moments, eager_raised = _eager_skipping(batches, "sgd", (BAD_STEP, BAD_STEP + 1))
    assert eager_raised == []
    state, moments, raised = _train("lazy", batches, "sgd", read_every_step=False)
    assert [i for i, _ in raised] == [BAD_STEP + 1]
    assert isinstance(raised[0][1], _batches_error(bad))
    for k in expected:
        torch.testing.assert_close(state[k], expected[k], msg=k)
    for got, want in zip(moments, expected_moments):
        for k in want:
            torch.testing.assert_close(got[k], want[k], msg=k)


def test_views_of_written_storages_and_a_tensor_the_step_made(native_built):
    """A view of a parameter sees the value given back; a tensor the failed
    step made has no earlier value: reading it raises the step's error."""
    table = torch.randn(VOCAB, DIM)
    w = table.clone().to("lazy")
    row = w[2]  # a view, made before the step
    ids = torch.tensor([1, VOCAB + 5])
    out = F.embedding(ids.to("lazy"), w)
    w.add_(out.sum())  # the write reads the failing embedding
    with pytest.raises(IndexError):
        w.sum().item()
    torch.testing.assert_close(w.cpu(), table)
    torch.testing.assert_close(row.cpu(), table[2])
    with pytest.raises(IndexError):
        out.cpu()
    w.mul_(2)  # trains on
    torch.testing.assert_close(w.cpu(), table * 2)
    torch.testing.assert_close(row.cpu(), table[2] * 2)


def test_wait_device_ops_reports_a_failed_step_and_gives_back(native_built, monkeypatch):
    """A step whose graph fails on the worker (here: a simulated kernel
    error) is given back when wait_device_ops() reports it."""
    from lazymlir.execution import entries

    x0 = torch.randn(16)
    x = x0.to("lazy")
    x.mul_(3)
    lazymlir.mark_step()
    lazymlir.wait_device_ops()

    def broken(self, inputs, outs, background):
        raise RuntimeError("simulated kernel failure")

    monkeypatch.setattr(entries.Compiled, "run_into", broken)
    x.add_(1)
    lazymlir.mark_step()
    with pytest.raises(RuntimeError, match="simulated kernel failure"):
        lazymlir.wait_device_ops()
    monkeypatch.undo()
    torch.testing.assert_close(x.cpu(), x0 * 3)
    lazymlir.wait_device_ops()  # reported once
    assert not errors.unreported
