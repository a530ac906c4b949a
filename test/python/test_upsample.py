"""Upsampling (F.interpolate) compiles, forward and backward, with eager's
values (lowering/upsample.py); and an op found not to lower is marked for
the configuration it failed with only (linalg.op_config), so its other
configurations still compile in the same process."""

import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazymlir
from lazymlir import metrics
from lazymlir.lowering import linalg, LoweringError

from conftest import assert_compiled

# (mode, align_corners, input shape, interpolate's size / scale_factor)
CASES = [
    ("nearest", None, (2, 3, 5, 7), dict(scale_factor=2)),
    ("nearest", None, (2, 3, 5, 7), dict(size=(12, 9))),
    ("nearest", None, (2, 3, 9, 11), dict(size=(4, 5))),
    ("nearest", None, (2, 3, 7), dict(scale_factor=1.7)),
    ("nearest", None, (1, 2, 3, 4, 5), dict(size=(5, 7, 8))),
    ("nearest-exact", None, (2, 3, 5, 7), dict(size=(12, 9))),
    ("nearest-exact", None, (2, 3, 9, 11), dict(scale_factor=0.6)),
    ("nearest-exact", None, (2, 3, 7), dict(size=11)),
    ("nearest-exact", None, (1, 2, 3, 4, 5), dict(scale_factor=2)),
    ("linear", False, (2, 3, 7), dict(size=16)),
    ("linear", True, (2, 3, 7), dict(scale_factor=2.5)),
    ("bilinear", False, (2, 3, 5, 7), dict(scale_factor=2)),
    ("bilinear", True, (2, 3, 5, 7), dict(scale_factor=2)),
    ("bilinear", False, (2, 3, 5, 7), dict(size=(13, 10))),
    ("bilinear", True, (2, 3, 5, 7), dict(size=(13, 10))),
    ("bilinear", False, (2, 3, 12, 11), dict(size=(5, 4))),
    ("bilinear", False, (2, 3, 5, 7), dict(scale_factor=1.3)),
    ("bicubic", False, (2, 3, 5, 7), dict(scale_factor=2)),
    ("bicubic", True, (2, 3, 5, 7), dict(scale_factor=2)),
    ("bicubic", False, (2, 3, 6, 5), dict(size=(11, 14))),
    ("bicubic", True, (2, 3, 12, 11), dict(size=(5, 4))),
    ("trilinear", False, (1, 2, 3, 4, 5), dict(scale_factor=2)),
    ("trilinear", True, (1, 2, 3, 4, 5), dict(size=(5, 7, 8))),
]


def _interpolate(x, mode, align_corners, kw):
    return F.interpolate(x, mode=mode, align_corners=align_corners, **kw)


def _forward_backward(x, mode, align_corners, kw, weight):
    x = x.detach().requires_grad_()
    y = _interpolate(x, mode, align_corners, kw)
    (y * weight).sum().backward()
    return y, x.grad


def _check(mode, align_corners, shape, kw, dtype=torch.float32, tol=None, memory_format=None):
    x = torch.randn(shape, dtype=dtype)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    weight = torch.randn(_interpolate(x, mode, align_corners, kw).shape, dtype=dtype)
    want, want_grad = _forward_backward(x, mode, align_corners, kw, weight)
    metrics.reset()
    got, got_grad = _forward_backward(x.to("lazy"), mode, align_corners, kw, weight.to("lazy"))
    lazymlir.mark_step()
    tol = tol or dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.cpu(), want, **tol)
    torch.testing.assert_close(got_grad.cpu(), want_grad, **tol)
    assert_compiled()  # no aten::upsample* counter: forward and backward compiled


# The fast tier: one case per mode (forward and backward; align_corners
# True and False, upsampling and downsampling among them); the others are slow.
_FAST_CASES = {0, 5, 10, 11, 20, 21}


@pytest.mark.parametrize(
    "mode, align_corners, shape, kw",
    [pytest.param(*c, marks=() if i in _FAST_CASES else pytest.mark.slow) for i, c in enumerate(CASES)],
    ids=[f"{c[0]}-{c[1]}-{len(c[2])}d-{i}" for i, c in enumerate(CASES)],
)
def test_upsample_forward_backward_compiled(native_built, mode, align_corners, shape, kw):
    _check(mode, align_corners, shape, kw)


_aten = torch.ops.aten


@pytest.mark.parametrize(
    "fwd, bwd, extra",
    [
        pytest.param(
            _aten.upsample_nearest2d.default, _aten.upsample_nearest2d_backward.default, (), marks=pytest.mark.slow
        ),
        pytest.param(
            _aten._upsample_nearest_exact2d.default,
            _aten._upsample_nearest_exact2d_backward.default,
            (),
            marks=pytest.mark.slow,
        ),
        (_aten.upsample_bilinear2d.default, _aten.upsample_bilinear2d_backward.default, (False,)),
        pytest.param(
            _aten.upsample_bicubic2d.default,
            _aten.upsample_bicubic2d_backward.default,
            (False,),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["nearest", "nearest-exact", "bilinear", "bicubic"],
)
def test_upsample_explicit_scales_and_sizes(native_built, fwd, bwd, extra):
    """The ops themselves with scales that do not match their sizes (many
    outputs clamped onto the last input position): the backward's window
    still reaches them all."""
    x = torch.randn(2, 3, 5, 4)
    g = torch.randn(2, 3, 20, 9)
    metrics.reset()
    args = extra + (10.0, 3.0)  # scales: 5 * 10 > 20 rows, 4 * 3 > 9 columns
    got = fwd(x.to("lazy"), [20, 9], *args).cpu()
    got_grad = bwd(g.to("lazy"), [20, 9], list(x.shape), *args).cpu()
    torch.testing.assert_close(got, fwd(x, [20, 9], *args), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_grad, bwd(g, [20, 9], list(x.shape), *args), rtol=1e-5, atol=1e-5)
    assert_compiled()


@pytest.mark.slow
def test_upsample_float64(native_built):
    _check("bicubic", False, (2, 3, 5, 7), dict(size=(11, 13)), dtype=torch.float64, tol=dict(rtol=1e-12, atol=1e-12))


def test_upsample_channels_last(native_built):
    _check("bilinear", False, (2, 3, 5, 7), dict(scale_factor=2), memory_format=torch.channels_last)


@pytest.mark.parametrize(
    "mode",
    [pytest.param("nearest", marks=pytest.mark.slow), "bilinear", pytest.param("bicubic", marks=pytest.mark.slow)],
)
def test_upsample_bfloat16(native_built, mode):
    """bfloat16 computed as eager computes it (in float32, rounded once)."""
    _check(
        mode,
        None if mode == "nearest" else False,
        (2, 3, 5, 7),
        dict(size=(9, 12)),
        dtype=torch.bfloat16,
        tol=dict(rtol=2e-2, atol=2e-2),
    )


def test_upsample_under_autocast(native_built):
    """A convolution in bfloat16 under autocast, then bilinear upsampling of its result."""
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 6, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.interpolate(conv(x), scale_factor=2, mode="bilinear")
    lazy_conv = conv.to("lazy")
    metrics.reset()
    with torch.autocast("lazy", dtype=torch.bfloat16):
        got = F.interpolate(lazy_conv(x.to("lazy")), scale_factor=2, mode="bilinear")
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-2)
    assert_compiled()


class _PythonCalls:
    """Counts the ops that reach the Python handlers (tensor.dispatch)."""

    def __enter__(self):
        from lazymlir import _device
        from lazymlir.frontend import tensor

        self.ops = []

        def counting(func, args, kwargs):
            self.ops.append(str(func))
            return tensor.dispatch(func, args, kwargs)

        _device.install(counting, tensor.State.copy)
        return self

    def __exit__(self, *exc):
        from lazymlir import _device
        from lazymlir.frontend import tensor

        _device.install(tensor.dispatch, tensor.State.copy)


def test_a_configuration_that_does_not_lower_leaves_the_others_compiled(monkeypatch, native_built, fresh_cache):
    """bilinear upsampling made not to lower with align_corners=True: that
    configuration runs eagerly from then on, align_corners=False still
    compiles in the same process (the mark was per op and input dtypes: the
    first failure made every later bilinear upsampling eager), recorded by
    the C++ fast path."""
    ops = sys.modules["lazymlir.frontend.ops"]
    op = torch.ops.aten.upsample_bilinear2d.default
    real = linalg.lower

    def lower(gm, example_inputs, **kwargs):
        if any(n.target is op and n.args[2] is True for n in gm.graph.nodes):
            raise LoweringError("simulated: align_corners=True does not lower")
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(linalg, "lower", lower)
    x = torch.randn(1, 2, 4, 5)

    def run(align_corners, size=(8, 10)):
        got = F.interpolate(x.to("lazy") * 2, size=size, mode="bilinear", align_corners=align_corners)
        want = F.interpolate(x * 2, size=size, mode="bilinear", align_corners=align_corners)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)

    try:
        with pytest.warns(RuntimeWarning, match="aten.upsample_bilinear2d.default"):
            run(True)
        assert metrics.executed_fallback_ops() == ["aten::upsample_bilinear2d"]
        metrics.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no failed compile, no probe
            run(False)
            assert_compiled()
            metrics.reset()
            run(True, size=(9, 11))  # other sizes: the same configuration, eager at dispatch
            assert_compiled("aten::upsample_bilinear2d")
            metrics.reset()
            with _PythonCalls() as calls:  # recorded in C++ (ops.fast_meta asked), not through Python's mark check
                run(False, size=(7, 12))
            assert [o for o in calls.ops if o != "aten._to_copy.default"] == [], calls.ops  # transfers: Python's
            assert_compiled()
        # The mark names the configuration it failed with.
        (config,) = lazymlir.frontend.tensor._eager_dtypes[op]
        assert config[:2] == ((torch.float32,), (4,)) and ("b", True) in config[2][0]
    finally:
        ops._forget_eager(op)


def test_dtype_marks_of_torch_compile_regions_still_cover_every_configuration(native_built):
    """torch.compile's regions mark (op, input dtypes): every configuration
    with those dtypes runs eagerly, others still compile."""
    ops = sys.modules["lazymlir.frontend.ops"]
    op = torch.ops.aten.upsample_nearest2d.default
    ops._run_eagerly_from_now_on((op, (torch.float64,)))
    try:
        x = torch.randn(1, 2, 3, 4, dtype=torch.float64)
        for size in ((6, 8), (5, 5)):
            got = F.interpolate(x.to("lazy") + 1, size=size).cpu()
            torch.testing.assert_close(got, F.interpolate(x + 1, size=size))
        assert metrics.counter_value("aten::upsample_nearest2d") == 2, metrics.metrics_report()
        metrics.reset()
        x = x.float()
        torch.testing.assert_close(
            F.interpolate(x.to("lazy") + 1, size=(6, 8)).cpu(), F.interpolate(x + 1, size=(6, 8))
        )
        assert_compiled()
    finally:
        ops._forget_eager(op)
