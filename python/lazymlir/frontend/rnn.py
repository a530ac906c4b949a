"""Recurrent layers on the lazy device.

LSTM and GRU cells: ATen's RNN layers treat a
PrivateUse1 device like CUDA: each step of `nn.LSTM`/`nn.GRU` calls the fused
cell ops `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell`, and their backward
ops, which have CUDA kernels only (a CPU build has none at all), so an eager
fallback cannot run them. These handlers record their math instead, as
aten/src/ATen/native/cuda/RNN.cu computes it, workspace layout included
(autograd hands the forward's workspace to the backward op).

Packed sequences: `_pack_padded_sequence` returns its batch sizes on the CPU
whatever the device (PackedSequence and the RNN layers read them there); they
come from the lengths, which are on the CPU too, so only the gather of the
data is recorded."""

import torch

from .handlers import _named

aten = torch.ops.aten


def _gates(input_gates, hidden_gates, input_bias, hidden_bias, chunks):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    return gates.chunk(chunks, 1)


def lstm_cell(func, args, kwargs):
    """(hy, cy, workspace): workspace holds the activated gates i, f, g, o."""
    ig, hg, cx, b_ih, b_hh = _named(func, args, kwargs).values()
    i, f, g, o = _gates(ig, hg, b_ih, b_hh, 4)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(func, args, kwargs):
    """(grad of the gates before activation, grad of cx, grad of the bias)."""
    grad_hy, grad_cy, cx, cy, workspace, has_bias = _named(func, args, kwargs).values()
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, g, o = workspace.chunk(4, 1)
    if grad_hy is None:
        go, gc = torch.zeros_like(o), grad_cy
    else:
        t = cy.tanh()
        go = grad_hy * t * (1 - o) * o
        gc = grad_hy * o * (1 - t * t)
        if grad_cy is not None:
            gc = gc + grad_cy
    gi = gc * g * (1 - i) * i
    gf = gc * cx * (1 - f) * f
    gg = gc * i * (1 - g * g)
    grad_gates = torch.cat([gi, gf, gg, go], 1)
    return grad_gates, gc * f, grad_gates.sum(0) if has_bias else None


def gru_cell(func, args, kwargs):
    """(hy, workspace): workspace holds r, z, n, the hidden gate's n part
    (with its bias) and hx."""
    ig, hg, hx, b_ih, b_hh = _named(func, args, kwargs).values()
    if b_ih is not None:
        ig = ig + b_ih
    if b_hh is not None:
        hg = hg + b_hh
    ir, iz, in_ = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hn, hx], 1)


def gru_cell_backward(func, args, kwargs):
    """(grad of the input gates, of the hidden gates, of hx, of the two biases)."""
    grad_hy, workspace, has_bias = _named(func, args, kwargs).values()
    r, z, n, hn, hx = workspace.chunk(5, 1)
    gz = grad_hy * (hx - n) * (1 - z) * z
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * (1 - r) * r
    grad_input = torch.cat([gr, gz, gn], 1)
    grad_hidden = torch.cat([gr, gz, gn * r], 1)
    if has_bias:
        return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)
    return grad_input, grad_hidden, grad_hy * z, None, None


def pack_padded_sequence(func, args, kwargs):
    """(data, batch sizes on the CPU), as ATen's PackedSequence.cpp: the time
    steps' rows of the sequences still running, one step after another."""
    x, lengths, batch_first = _named(func, args, kwargs).values()
    if lengths.device.type != "cpu" or lengths.dim() != 1:
        raise RuntimeError(
            f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D {lengths.device} {lengths.dtype} tensor"
        )
    if batch_first:
        x = x.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    lengths = lengths.to(torch.int64)
    if lengths.numel() != batch:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {lengths.numel()} (batch_size={batch})"
        )
    if batch and int(lengths[-1]) <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    if batch > 1 and bool((lengths[1:] > lengths[:-1]).any()):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if you do not need ONNX exportability."
        )
    if batch and int(lengths[0]) > steps:
        raise RuntimeError(f"Expected sequence length to be at most {steps}, but got {int(lengths[0])}")
    batch_sizes = (lengths.unsqueeze(0) > torch.arange(int(lengths[0]) if batch else 0).unsqueeze(1)).sum(1)
    rows = torch.cat([torch.arange(int(n)) + t * batch for t, n in enumerate(batch_sizes)]) if batch else lengths
    data = x.reshape((steps * batch,) + tuple(x.shape[2:])).index_select(0, rows.to(x.device))
    return data, batch_sizes


HANDLERS = {
    aten._pack_padded_sequence.default: pack_padded_sequence,
    aten._thnn_fused_lstm_cell.default: lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: gru_cell,
    aten._thnn_fused_gru_cell_backward.default: gru_cell_backward,
}
