"""The lazy device among PyTorch's devices as CUDA is (issue 47): a tensor of
another device in a lazy op is refused at the op, with CUDA's message (CPU
scalars, copies and index tensors stay allowed, as on CUDA);
``torch.accelerator`` works on it; and any import order works (PyTorch's
backend autoload makes the device at ``import torch``)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir.execution import run

from conftest import assert_compiled

SAME_DEVICE = r"^Expected all tensors to be on the same device, but found at least two devices, lazy:0 and cpu!$"


def _lazy(t):
    return t.to("lazy")


# Each refused on CUDA with a CUDA tensor where the lazy one is; before, the
# lazy device recorded the CPU tensor as device data, ran the forward and
# failed at backward (MulBackward0 returned an invalid gradient ... expected
# device cpu but got lazy:0).
REFUSED = {
    "lazy + cpu": lambda x, c: x + c,
    "cpu * lazy": lambda x, c: c * x,
    "in place": lambda x, c: x.clone().add_(c),
    "out= on cpu": lambda x, c: torch.add(x.detach(), 1, out=torch.empty(2, 3)),
    "where": lambda x, c: torch.where(x > 2, x, c),
    "matmul": lambda x, c: x @ c.t(),
    "cat": lambda x, c: torch.cat([x, c]),
    "linear on a cpu input": lambda x, c: torch.nn.Linear(3, 2).to("lazy")(c),
    "cpu index_select index": lambda x, c: x.index_select(0, torch.tensor([1])),
    "cpu cross_entropy target": lambda x, c: F.cross_entropy(x, torch.tensor([0, 1])),
    "cpu values of index_put": lambda x, c: x.clone().index_put_((torch.tensor([0]),), torch.ones(3)),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_cpu_tensor_in_a_lazy_op_is_refused_at_the_op(case):
    x = _lazy(torch.arange(6.0).reshape(2, 3).requires_grad_())
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        REFUSED[case](x, torch.ones(2, 3, requires_grad=True))


def test_a_lazy_module_refuses_a_cpu_batch_before_backward():
    """The case of the issue: a lazy nn.Linear on a CPU input, trained."""
    model = torch.nn.Linear(4, 2).to("lazy")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        model(torch.randn(3, 4)).sum().backward()
    assert all(p.grad is None for p in model.parameters())


def test_cpu_scalars_copies_and_indices_work_as_on_cuda(native_built):
    """What CUDA takes from the CPU in an op on its tensors: 0-dim tensors
    (scalars), the source of a copy, advanced indexing's indices (long and
    bool, reading and writing); gradients flow to the lazy leaf as in eager."""
    base = torch.arange(12.0).reshape(4, 3)
    scalar = torch.tensor(2.5)
    rows = torch.tensor([2, 0, 2])
    mask = base > 6

    def f(x, write_rows, values):
        y = x * scalar + torch.tensor(1.0)  # 0-dim CPU tensors
        y = torch.where(y > 10, y, torch.tensor(0.5))
        picked = y[rows]  # CPU long index
        masked = y[mask]  # CPU bool mask
        z = y.clone()
        z[write_rows] = values  # index_put_ with CPU indices, values on the device
        w = torch.empty_like(y).copy_(torch.full((4, 3), 3.0))  # copy_ from the CPU
        return picked.sum() + masked.sum() + (z * w).sum()

    leaf = base.clone().requires_grad_()
    expected = f(leaf, torch.tensor([1, 3]), torch.full((2, 3), 7.0))
    expected.backward()

    lazy_leaf = _lazy(base).requires_grad_()
    out = f(lazy_leaf, torch.tensor([1, 3]), _lazy(torch.full((2, 3), 7.0)))
    out.backward()
    lazymlir.mark_step()
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(lazy_leaf.grad.cpu(), leaf.grad)
    assert_compiled("aten::index")  # y[mask]: its shape is the mask's value, eager as with a lazy mask

    # And the line: one non-scalar CPU operand is refused.
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        lazy_leaf * torch.ones(4, 3)


@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_with_cpu_step_tensors_trains_as_in_eager(native_built, foreach):
    """AdamW (not capturable) keeps its step counts as 0-dim CPU tensors and
    does the rest on the parameters' device: unchanged by the device check."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    lazy_model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    lazy_model.load_state_dict(model.state_dict())
    lazy_model.to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, foreach=foreach)
    lazy_opt = torch.optim.AdamW(lazy_model.parameters(), lr=0.05, foreach=foreach)
    data = [(torch.randn(6, 5), torch.randn(6, 1)) for _ in range(3)]
    for x, y in data:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        lazy_opt.zero_grad()
        F.mse_loss(lazy_model(_lazy(x)), _lazy(y)).backward()
        lazy_opt.step()
        lazymlir.mark_step()
    for p, q in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-6)
    steps = [s["step"] for s in lazy_opt.state.values()]
    assert all(s.device.type == "cpu" and s.dim() == 0 and s.item() == 3 for s in steps)
    assert_compiled()


def test_torch_accelerator_on_the_lazy_device(native_built):
    acc = torch.accelerator
    assert acc.is_available()
    assert acc.current_accelerator() == torch.device("lazy")
    assert acc.device_count() == 1
    assert acc.current_device_index() == 0
    acc.set_device_index(0)
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    with pytest.raises(RuntimeError, match="single lazy device"):
        acc.set_device_index(1)
    assert acc.current_stream().device == torch.device("lazy", 0)

    x = torch.randn(64, 64)
    y = torch.tanh(_lazy(x) @ _lazy(x)).sum(0)
    lazymlir.mark_step()  # the step runs on the worker
    acc.synchronize()  # was: Backend doesn't support synchronizing all streams on device.
    assert run.idle()
    torch.testing.assert_close(y.cpu(), torch.tanh(x @ x).sum(0))
    assert_compiled()

    stream = torch.Stream("lazy")
    stream.synchronize()
    event = torch.Event("lazy")
    event.record(stream)
    event.synchronize()
    assert event.query()


def test_device_synchronize_waits_for_the_graphs_and_raises_their_errors(monkeypatch):
    """The device guard's synchronize (torch.accelerator, torch.Stream,
    torch.Event) is lazymlir.wait_device_ops: it waits and raises a failed
    graph's error."""
    calls = []
    monkeypatch.setattr(run, "wait_device_ops", lambda: calls.append(1))
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    torch.Stream("lazy").synchronize()
    torch.lazy.synchronize()
    assert len(calls) == 4

    def failed():
        raise ValueError("a graph failed")

    monkeypatch.setattr(run, "wait_device_ops", failed)
    with pytest.raises(ValueError, match="a graph failed"):
        torch.accelerator.synchronize()


def _python(code, **env):
    """Runs ``code`` in a fresh interpreter: (returncode, stdout, stderr)."""
    environ = dict(os.environ, **env)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600, env=environ
    )
    return done.returncode, done.stdout, done.stderr


REPRO = """
    import torch
    x = torch.ones(3, requires_grad=True); (x * 2).sum().backward()
    import lazymlir
    y = torch.ones(3).to("lazy").requires_grad_(); (y * 2).sum().backward()
    assert y.grad.cpu().tolist() == [2.0, 2.0, 2.0], y.grad
    print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("autoload", ["1", "0"])
def test_lazymlir_imported_after_an_eager_backward(autoload):
    """Before, every lazy backward then failed an INTERNAL ASSERT in autograd's
    engine (its device queues were sized at its first backward, before the
    lazy device existed). With torch's backend autoload the device exists
    from `import torch` on; without it (TORCH_DEVICE_BACKEND_AUTOLOAD=0),
    `import lazymlir` gives the started engine the queue it lacks."""
    rc, out, err = _python(REPRO, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert rc == 0 and out.strip().endswith("ok"), err[-3000:]


@pytest.mark.slow
def test_import_torch_makes_the_device_only():
    """The autoload entry point is installed and loads the device, not the
    compiler; `import lazymlir` afterwards is the whole package, once."""
    rc, out, err = _python("""
        import sys
        from importlib.metadata import entry_points
        names = {e.name: e.value for e in entry_points(group="torch.backends")}
        assert names.get("lazymlir") == "lazymlir.autoload:autoload", names
        import torch
        assert torch._C._get_privateuse1_backend_name() == "lazy"
        assert torch.get_device_module("lazy").device_count() == 1
        loaded = sorted(m for m in sys.modules if m.startswith("lazymlir"))
        assert loaded == ["lazymlir._device", "lazymlir.autoload", "lazymlir.frontend",
                          "lazymlir.frontend.device_module"], loaded
        torch.accelerator.synchronize()  # nothing ran: nothing to wait for, nothing imported
        assert "lazymlir.execution.run" not in sys.modules
        try:
            torch.ones(3).to("lazy")
        except RuntimeError as e:
            assert "`import lazymlir` before using the lazy device" in str(e), e
        else:
            raise AssertionError("the lazy device worked without its tracer")
        import lazymlir
        import lazymlir as again
        import importlib
        assert again is lazymlir is importlib.import_module("lazymlir") is sys.modules["lazymlir"]
        assert lazymlir._device is sys.modules["lazymlir._device"] and lazymlir.mark_step
        x = torch.arange(4.0).to("lazy")
        assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
        print("ok")
    """)
    assert rc == 0 and out.strip().endswith("ok"), err[-3000:]


@pytest.mark.slow
def test_lazymlir_imported_before_torch():
    """`import lazymlir` first imports torch, whose autoload finds lazymlir
    under way and leaves the device to it."""
    rc, out, err = _python("""
        import sys
        import lazymlir
        import torch
        assert sys.modules["lazymlir"] is lazymlir and lazymlir.mark_step
        y = torch.ones(3).to("lazy").requires_grad_(); (y * 3).sum().backward()
        assert y.grad.cpu().tolist() == [3.0, 3.0, 3.0]
        print("ok")
    """)
    assert rc == 0 and out.strip().endswith("ok"), err[-3000:]


@pytest.mark.slow
def test_import_torch_survives_a_device_that_cannot_load():
    """A build under way or removed (lazymlir._device missing: CMake's own
    `import torch` probe during a build) costs a warning at `import torch`,
    not the import; `import lazymlir` raises the real error."""
    rc, out, err = _python("""
        import sys, warnings
        class NoDevice:
            def find_spec(self, name, path=None, target=None):
                if name == "lazymlir._device":
                    raise ImportError("no _device here")
        sys.meta_path.insert(0, NoDevice())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        assert any("lazy device was not registered" in str(w.message) for w in caught), [str(w.message) for w in caught]
        assert "lazymlir" not in sys.modules
        try:
            import lazymlir
        except ImportError as e:
            assert "no _device here" in str(e), e
        else:
            raise AssertionError("lazymlir imported without its device")
        print("ok")
    """)
    assert rc == 0 and out.strip().endswith("ok"), err[-3000:]


def test_exit_leaves_the_autograd_device_thread_idle():
    """Issue 47, item 3: at exit, after the user's atexit handlers, one small
    backward runs through lazy:0's autograd thread (registration._quiesce_autograd),
    so that thread has finished the last backward's graph task (whose last
    references may decref Python objects, taking the GIL) before the
    interpreter finalizes; its own tensors stay alive, so nothing of it is
    left to free there. Without a backward in the process, nothing runs."""
    script = textwrap.dedent(
        """
        import atexit, sys, threading, torch, lazymlir
        engine = torch.autograd.Variable._execution_engine
        class Traced:  # every backward, the exit's too (it calls the engine directly)
            def __getattr__(self, name):
                return getattr(engine, name)
            def run_backward(self, tensors, *a, **k):
                print("backward", tensors[0].device.type, "after-user-atexit" if done else "", flush=True)
                return engine.run_backward(tensors, *a, **k)
        torch.autograd.Variable._execution_engine = Traced()
        done = False
        def user():
            global done
            done = True
        atexit.register(user)
        if sys.argv[1] == "train":
            model = torch.nn.Linear(4, 2).to("lazy")
            model(torch.ones(3, 4, device="lazy")).sum().backward()
            print("grad", float(model.weight.grad.sum()), flush=True)
        """
    )
    trained = subprocess.run([sys.executable, "-c", script, "train"], capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    lines = trained.stdout.split("\n")
    assert lines[:2] == ["backward lazy ", "grad 24.0"], trained.stdout
    assert lines[2:] == ["backward lazy after-user-atexit", ""], trained.stdout
    idle = subprocess.run([sys.executable, "-c", script, "none"], capture_output=True, text=True, timeout=300)
    assert idle.returncode == 0 and idle.stdout == "", idle.stdout + idle.stderr[-3000:]
