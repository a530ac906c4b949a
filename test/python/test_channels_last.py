"""Memory formats end to end on the lazy device (issue 7): a ResNet basic block
and the tutorial's MNIST CNN, with inputs and parameters in NCHW or
channels_last, with the NHWC pass on (default) and off, must give eager's values
AND eager's memory formats (outputs, gradients, updated buffers), compiled.
Channels-last device data reaches compiled graphs as is: no transposes at the
graph's boundary."""

import copy
import os
import subprocess
import sys

import pytest
import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import config, metrics
from lazymlir.testing import BasicBlock, MnistNet

CL = torch.channels_last
FORMATS = {"nchw": torch.contiguous_format, "channels_last": CL}


def _model(name):
    torch.manual_seed(0)
    if name == "resnet_block":
        model = BasicBlock(8)
        with torch.no_grad():  # non-trivial batch-norm statistics and affine
            for bn in (model.bn1, model.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
        return model, torch.randn(2, 8, 8, 8)
    return MnistNet(), torch.randn(4, 1, 28, 28)


def _same(ref, out, what, tol=1e-4):
    """Values and layout (shape, strides, memory format) as eager."""
    assert out.device.type == "lazy", what
    assert (out.shape, out.stride()) == (ref.shape, ref.stride()), (what, out.stride(), ref.stride())
    assert out.is_contiguous(memory_format=CL) == ref.is_contiguous(memory_format=CL), what
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=tol, atol=tol, msg=what)


def _step(model, x, train):
    """One forward (and, training, backward) with the same dropout stream."""
    torch.manual_seed(1)
    model.train(train)
    x = x.clone().requires_grad_(train)
    out = model(x)
    if train:
        (out.square().mean() if out.dim() == 4 else -out[:, 0].mean()).backward()
    return x, out


@pytest.mark.parametrize("channels_last_pass", [True, False], ids=["pass", "no_pass"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["resnet_block", "mnist_cnn"])
def test_training_step_matches_eager(native_built, name, fmt, channels_last_pass):
    """A training step (batch norm in training mode, dropout): output, the
    input's and every parameter's gradient, and the updated running stats,
    with eager's values and memory formats (a channels_last parameter's
    gradient is channels_last in eager too)."""
    ref, x = _model(name)
    ref = ref.to(memory_format=FORMATS[fmt])
    x = x.to(memory_format=FORMATS[fmt])
    lazy = copy.deepcopy(ref).to("lazy")
    if fmt == "channels_last":
        assert lazy.conv1.weight.is_contiguous(memory_format=CL)
    rx, rout = _step(ref, x, train=True)
    with config.patch(channels_last=channels_last_pass):
        metrics.reset()
        lx, lout = _step(lazy, x.to("lazy"), train=True)
        lazymlir.mark_step()
        _same(rout, lout, "output")
        _same(rx.grad, lx.grad, "input grad")
        for (pname, p), q in zip(ref.named_parameters(), lazy.parameters()):
            _same(p.grad, q.grad, pname + ".grad")
        for (bname, b), q in zip(ref.named_buffers(), lazy.buffers()):
            _same(b, q, bname)
        assert_compiled()
        assert metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile") == 1


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["resnet_block", "mnist_cnn"])
def test_inference_matches_eager(native_built, name, fmt):
    ref, x = _model(name)
    ref = ref.to(memory_format=FORMATS[fmt])
    x = x.to(memory_format=FORMATS[fmt])
    lazy = copy.deepcopy(ref).to("lazy")
    metrics.reset()
    with torch.no_grad():
        _, rout = _step(ref, x, train=False)
        _, lout = _step(lazy, x.to("lazy"), train=False)
    _same(rout, lout, "output")
    assert_compiled()


def test_model_moved_to_channels_last_on_the_lazy_device(native_built):
    """.to("lazy") first, then .to(memory_format=channels_last) on the device:
    a compiled relayout, then the same results as eager."""
    ref, x = _model("resnet_block")
    lazy = copy.deepcopy(ref).to("lazy").to(memory_format=CL)
    ref = ref.to(memory_format=CL)
    lx = x.to("lazy").to(memory_format=CL)
    assert lx.is_contiguous(memory_format=CL) and lazy.conv2.weight.is_contiguous(memory_format=CL)
    with torch.no_grad():
        _, rout = _step(ref, x.to(memory_format=CL), train=False)
        _, lout = _step(lazy, lx, train=False)
    _same(rout, lout, "output")
    assert_compiled()


def _eval_block(fmt, tmp_path):
    """The eval-mode block on the lazy device, dumped: (kernels, linalg text)."""
    ref, x = _model("resnet_block")
    lazy = copy.deepcopy(ref).to(memory_format=fmt).to("lazy").eval()
    lx = x.to(memory_format=fmt).to("lazy")
    lazymlir.cache.clear()
    with config.patch(dump_dir=str(tmp_path)), torch.no_grad():
        out = lazy(lx)
        lazymlir.mark_step()
    torch.testing.assert_close(out.cpu(), ref.eval()(x), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=fmt)
    [linalg] = [f for f in os.listdir(tmp_path) if f.endswith(".linalg.mlir")]
    return lazymlir.kernel_count(out), (tmp_path / linalg).read_text()


# Reading NCHW memory in NHWC order or the reverse: what a boundary transpose
# becomes once fused into its consumer.
_RELAYOUT_MAPS = ("-> (d0, d3, d1, d2)>", "-> (d0, d2, d3, d1)>")


def _after_layout_passes(path_text, tmp_path):
    opt = os.path.join(os.path.dirname(sys.executable), "lazymlir-opt")
    src = tmp_path / "in.mlir"
    src.write_text(path_text)
    return subprocess.run(
        [
            opt,
            str(src),
            "--mlir-print-local-scope",
            "--pass-pipeline=builtin.module(func.func(lazymlir-channels-last,lazymlir-fuse-elementwise),canonicalize,cse)",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_channels_last_storage_passed_as_is(native_built, fresh_cache, tmp_path):
    """channels_last input and parameters: the graph takes the NHWC buffers
    (its arguments have NHWC shapes) and returns the NHWC output buffer; the
    NHWC pass cancels the boundary permutes against the convs' own layout
    transposes, so no activation is relaid out (fewer kernels than from NCHW)."""
    cl_kernels, cl_text = _eval_block(CL, tmp_path / "cl")
    nchw_kernels, nchw_text = _eval_block(torch.contiguous_format, tmp_path / "nchw")
    assert "%arg0: tensor<2x8x8x8xf32>" in nchw_text  # square: check the weights
    assert "tensor<8x3x3x8xf32>" in cl_text and "tensor<8x3x3x8xf32>" not in nchw_text  # OHWI weights
    assert cl_kernels < nchw_kernels, (cl_kernels, nchw_kernels)
    cl_fused = _after_layout_passes(cl_text, tmp_path)
    assert "linalg.transpose" not in cl_fused
    assert not any(m in cl_fused for m in _RELAYOUT_MAPS), cl_fused
    # From NCHW storage the input and output are relaid out (the check sees it).
    assert any(m in _after_layout_passes(nchw_text, tmp_path) for m in _RELAYOUT_MAPS)


def test_layout_is_part_of_the_cache_key(native_built, fresh_cache):
    x = torch.randn(2, 3, 4, 5)
    for fmt in (torch.contiguous_format, CL, torch.contiguous_format, CL):
        out = (x.to(memory_format=fmt).to("lazy") * 2).relu()
        lazymlir.mark_step()
        _same((x.to(memory_format=fmt) * 2).relu(), out, str(fmt))
    assert (lazymlir.cache.stats().misses, lazymlir.cache.stats().hits) == (2, 2)
    with config.patch(channels_last=False):  # a compiler option: a new entry
        (x.to("lazy") * 2).relu().cpu()
    assert lazymlir.cache.stats().misses == 3


@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum"])
def test_optimizer_steps_on_channels_last_gradients(native_built, optimizer):
    """A channels_last input makes the convolutions' weight gradients
    channels_last; AdamW's lerp of them decomposed into prims.copy_strided,
    which torch-mlir does not lower: every step ran eagerly. Three steps
    compile, with eager's parameters."""
    ref, _ = _model("resnet_block")
    lazy = copy.deepcopy(ref).to("lazy")
    make = {
        "adamw": lambda ps: torch.optim.AdamW(ps, 1e-2),
        "sgd_momentum": lambda ps: torch.optim.SGD(ps, 1e-2, momentum=0.9),
    }[optimizer]
    opt_ref, opt_lazy = make(ref.parameters()), make(lazy.parameters())
    metrics.reset()
    torch.manual_seed(2)
    for _ in range(3):
        x = torch.randn(4, 8, 8, 8).to(memory_format=CL)
        for model, opt, dev in ((ref, opt_ref, "cpu"), (lazy, opt_lazy, "lazy")):
            opt.zero_grad()
            model(x.to(dev)).square().mean().backward()
            opt.step()
        lazymlir.mark_step()
    # AdamW's first steps move each weight by lr * g / (|g| + eps): where batch
    # norm leaves a gradient near zero (noise of the sums' order, ~1e-9), that
    # is a coin flip of size lr; atol 1e-4 is 1% of lr.
    atol = 1e-4 if optimizer == "adamw" else 1e-5
    for (name, p), q in zip(ref.named_parameters(), lazy.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=atol, msg=name)
    assert_compiled()
