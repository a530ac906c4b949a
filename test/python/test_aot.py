"""lazymlir.gpu.aot on a machine without a GPU: a training step traced on the lazy
device, every graph compiled for an NVIDIA chip into one bundle that
lazymlir.gpu.launch loads; ptxas assembles every kernel."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import testing
from lazymlir.gpu import aot
from lazymlir.gpu.launch import load_bundle
from test_gpu_ptx import cuda_root


def assemble_all(graphs, chip, tmp_path):
    ptxas = os.path.join(cuda_root(), "bin", "ptxas")
    count = 0
    for name, plan in graphs.items():
        for module, body in plan["modules"].items():
            path = tmp_path / f"{name}.{module}.ptx"
            path.write_text(body["ptx"])
            done = subprocess.run(
                [ptxas, f"-arch={chip}", str(path), "-o", str(path) + ".cubin"], capture_output=True, text=True
            )
            assert done.returncode == 0, f"{path}: {done.stderr}"
            count += 1
    return count


def test_mnist_training_steps_to_a_bundle(native_built, tmp_path):
    torch.manual_seed(0)
    model = testing.MnistNet().to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 1, 28, 28).to("lazy"), torch.randint(0, 10, (8,)).to("lazy")
    losses = []

    def step(x, y):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)

    path = str(tmp_path / "mnist.lzgpu")
    graphs = aot.compile_step(step, x, y, chip="sm_90", path=path, steps=2)
    assert all(torch.isfinite(loss.cpu()) for loss in losses)  # the steps really ran (on this CPU)
    loaded = load_bundle(path, device_chip="sm_90")
    assert set(loaded) == set(graphs) and len(graphs) >= 1
    for plan in graphs.values():
        assert 0 < plan["inputs"] < len(plan["arguments"])  # inputs, then outputs
    assert assemble_all(graphs, "sm_90", tmp_path) > 10


def test_command_line(native_built, tmp_path):
    (tmp_path / "factory.py").write_text("""
import torch
def make():
    def step(x, w):
        return torch.softmax(x @ w, -1).sum()
    return step, (torch.randn(64, 32), torch.randn(32, 16))
""")
    out = tmp_path / "softmax.lzgpu"
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "lazymlir.gpu.aot", "factory:make", "--chip", "sm_80", "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "graphs" in done.stdout and "sm_80" in done.stdout
    graphs = load_bundle(str(out), device_chip="sm_86")  # sm_80 PTX runs on newer chips
    assert assemble_all({n: g.plan for n, g in graphs.items()}, "sm_80", tmp_path) >= 1


def test_a_step_that_records_nothing_is_an_error(native_built):
    import pytest

    with pytest.raises(RuntimeError, match="recorded no graph"):
        aot.compile_step(lambda: None)
    assert lazymlir.metrics.counter_value("EagerGraph") == 0


@pytest.mark.slow
def test_gpt2_training_step_to_a_bundle(native_built, tmp_path):
    # A Hugging Face decoder (random weights, no download): attention with
    # its causal mask, embeddings and their scatter-add backward, AdamW.
    torch.manual_seed(0)
    model, make_batch, loss_fn = testing.hf_model("gpt2")
    model = model.to("lazy")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = make_batch("lazy")

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        return loss

    graphs = aot.compile_step(step, chip="sm_90", path=str(tmp_path / "gpt2.lzgpu"))
    assert load_bundle(str(tmp_path / "gpt2.lzgpu"), device_chip="sm_90").keys() == graphs.keys()
    assert assemble_all(graphs, "sm_90", tmp_path) > 100
