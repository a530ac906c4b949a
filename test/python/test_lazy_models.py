"""Small models on the lazy device, against eager, compiled."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 5 * 5, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.bn(self.conv2(x)))
        x = F.max_pool2d(x, 2)
        return self.fc(torch.flatten(x, 1))


def _infer(model, x, steps=1):
    model.eval()
    with torch.no_grad():
        ref = model(x)
        model.to("lazy")
        outs = []
        for _ in range(steps):
            out = model(x.to("lazy"))
            lazymlir.mark_step()
            outs.append(out.cpu())
    return ref, outs


def test_mlp(native_built):
    ref, outs = _infer(MLP(), torch.randn(8, 32), steps=3)
    for out in outs:
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert_compiled()
    assert lazymlir.metrics.counter_value("CachedCompile") >= 2


def test_cnn(native_built):
    model = CNN()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
    ref, (out,) = _infer(model, torch.randn(2, 1, 28, 28))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert_compiled()


def test_transformer_encoder_layer(native_built):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
    ref, (out,) = _infer(layer, torch.randn(2, 7, 32))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert_compiled()


def test_models_trace_without_native():
    """The tracer and eager graph execution alone give eager's answers."""
    with lazymlir.config.patch(force_eager=True):
        for model, x in ((MLP(), torch.randn(4, 32)), (CNN(), torch.randn(1, 1, 28, 28))):
            ref, (out,) = _infer(model, x)
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert lazymlir.metrics.counter_value("EagerGraph") > 0
    assert lazymlir.metrics.executed_fallback_ops() == []


def test_transformer_encoder_with_padding_mask_takes_the_standard_path(native_built):
    """PyTorch's inference fast path (fused kernels, nested tensors) covers
    PrivateUse1 devices; on the lazy device the modules take their standard
    path, which compiles: eager's values at every unpadded position."""
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=2).eval()
    x = torch.randn(3, 7, 32)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[0, 5:] = True
    pad[2, 3:] = True
    with torch.no_grad():
        ref = enc(x, src_key_padding_mask=pad)
        out = enc.to("lazy")(x.to("lazy"), src_key_padding_mask=pad.to("lazy")).cpu()
    torch.testing.assert_close(out[~pad], ref[~pad], rtol=1e-4, atol=1e-5)
    assert torch.backends.mha.get_fastpath_enabled()  # restored for other devices
    assert_compiled()


def _rnn_loss(rnn, x, lengths=None):
    if lengths is not None:
        x = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, state = rnn(x)
    if lengths is not None:
        out = nn.utils.rnn.pad_packed_sequence(out)[0]
    states = state if isinstance(state, tuple) else (state,)
    return out.pow(2).mean() + sum(s.pow(2).mean() for s in states)  # h_n and c_n get gradients too


@pytest.mark.parametrize(
    "name",
    ["lstm", "lstm_no_bias_proj", "gru_bidirectional", "lstm_packed"],
)
def test_recurrent_layers_train_like_eager(native_built, name):
    """nn.LSTM and nn.GRU on a PrivateUse1 device run ATen's fused cell ops
    (CUDA kernels only); the lazy device records their math, forward and
    backward (frontend/rnn_cells.py). Three SGD steps against eager's."""
    torch.manual_seed(0)
    rnn = {
        "lstm": lambda: nn.LSTM(8, 16, num_layers=2),
        "lstm_no_bias_proj": lambda: nn.LSTM(8, 16, bias=False, proj_size=6),
        "gru_bidirectional": lambda: nn.GRU(8, 16, bidirectional=True),
        "lstm_packed": lambda: nn.LSTM(8, 16),
    }[name]()
    lengths = torch.tensor([5, 3, 4]) if name == "lstm_packed" else None
    lazy = copy.deepcopy(rnn).to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (rnn, lazy)]
    for step in range(3):
        x = torch.randn(5, 3, 8)
        losses = []
        for model, opt, device in zip((rnn, lazy), opts, ("cpu", "lazy")):
            opt.zero_grad()
            loss = _rnn_loss(model, x.to(device), lengths)
            loss.backward()
            opt.step()
            losses.append(loss)
        lazymlir.mark_step()
        torch.testing.assert_close(losses[1].cpu(), losses[0], rtol=1e-4, atol=1e-6)
    for (n, p), q in zip(rnn.named_parameters(), lazy.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-4, atol=1e-6, msg=n)
    assert_compiled()


@pytest.mark.parametrize(
    "conv, shape",
    [
        (lambda: nn.Conv2d(8, 8, 3, padding=1, groups=8), (4, 8, 12, 12)),  # depthwise
        (lambda: nn.Conv2d(4, 6, 3, stride=2, dilation=2, padding=1, groups=2, bias=False), (3, 4, 11, 9)),
        (lambda: nn.Conv1d(6, 9, 4, stride=3, groups=3), (2, 6, 17)),
        (lambda: nn.Conv3d(4, 4, 2, groups=2), (2, 4, 5, 4, 6)),
        (lambda: nn.ConvTranspose2d(3, 8, 3, stride=2), (2, 3, 9, 9)),
        (lambda: nn.ConvTranspose2d(8, 8, 3, stride=2, groups=8), (2, 8, 5, 5)),
        (
            lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
            (2, 4, 7, 5),
        ),
        (lambda: nn.ConvTranspose1d(3, 5, 4, stride=3), (2, 3, 8)),
    ],
    ids=[
        "depthwise",
        "groups2_strided_dilated",
        "conv1d_groups3",
        "conv3d_groups2",
        "transposed",
        "transposed_depthwise",
        "transposed_groups2_output_padding",
        "transposed_1d",
    ],
)
def test_grouped_convolution_gradients_compile(native_built, conv, shape):
    """Grouped and transposed convolutions and their gradients compile
    (torch-mlir's lowerings of grouped weight gradients and of grouped or
    transposed convolutions' gradients made invalid IR or failed; a
    depthwise step ran eagerly, and a transposed one, once found not to
    lower, ran every convolution of the process eagerly) and equal eager's,
    channels_last input included."""
    torch.manual_seed(0)
    for memory_format in (torch.contiguous_format, torch.channels_last):
        if memory_format is torch.channels_last and len(shape) != 4:
            continue
        model = conv()
        lazy = copy.deepcopy(model).to("lazy")
        x = torch.randn(shape).to(memory_format=memory_format)
        out = model(x)
        out.square().mean().backward()
        xl = x.to("lazy").requires_grad_()
        lazy_out = lazy(xl)
        lazy_out.square().mean().backward()
        lazymlir.mark_step()
        torch.testing.assert_close(lazy_out.detach().cpu(), out.detach(), rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), lazy.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
        x.requires_grad_()
        model.zero_grad()
        model(x).square().mean().backward()
        torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    assert_compiled()
