"""The probe that finds the ops of a failed graph that do not lower
(linalg.find_unsupported) tries a multi-output op alone returning its first
tensor output, not its first output: convolution_backward with output_mask
[False, True, False] (an input that needs no gradient: wav2vec2's first
feature-extractor convolution, on the raw audio) has None first; a graph
returning None does not lower, so the probe marked that configuration and it
ran eagerly. Since the marks are per configuration (e7fc599) that mask is a
configuration of its own, tried whenever a graph fails (in wav2vec2's, the
weight norm's backward, which torch-mlir does not lower)."""

import sys
import warnings

import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import metrics

from conftest import assert_compiled

_aten = torch.ops.aten
_OPS = (_aten.convolution_backward.default, _aten._weight_norm_interface_backward.default)


def _step(x, w1, v, g, b):
    """wav2vec2's convolutions in small: a strided 1-D convolution of an
    input that needs no gradient (convolution_backward's output_mask
    [False, True, False]), then its positional convolution: grouped (4
    groups), weight-normed over dim 2, kernel 16, padding 8."""
    w1, v, g, b = (t.detach().requires_grad_() for t in (w1, v, g, b))
    h = F.conv1d(x, w1, stride=5)
    y = F.conv1d(h, torch._weight_norm(v, g, 2), b, padding=8, groups=4)
    (y * y).sum().backward()
    return y, w1.grad, v.grad, g.grad, b.grad


def test_convolution_backward_without_input_gradient_is_not_marked(native_built, fresh_cache):
    ops = sys.modules["lazymlir.frontend.ops"]
    saved = {op: ops._eager_dtypes.get(op) for op in _OPS}
    for op in _OPS:  # an earlier test may have marked them: then the probe would not run
        ops._forget_eager(op)
    torch.manual_seed(0)
    args = (
        torch.randn(2, 1, 200),
        torch.randn(32, 1, 10),
        torch.randn(32, 8, 16),
        torch.randn(1, 1, 16),
        torch.randn(32),
    )
    want = _step(*args)
    metrics.reset()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _step(*(t.to("lazy") for t in args))
            lazymlir.mark_step()
        for a, e in zip(got, want):
            torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
        # The graph failed (the weight norm's backward) and the probe ran.
        messages = [str(w.message) for w in caught]
        probed = [m for m in messages if "the rest compiles" in m]
        assert len(probed) == 1 and "_weight_norm_interface_backward" in probed[0], messages
        assert "convolution_backward" not in probed[0], probed
        assert_compiled("aten::_weight_norm_interface_backward")
    finally:
        for op in _OPS:
            ops._forget_eager(op)
            if saved[op] is not None:
                ops._eager_dtypes[op] = saved[op]
