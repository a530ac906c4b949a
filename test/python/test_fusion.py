"""Fusion end to end on the lazy device (issue 6): kernel counts (loop nests
after fusion and tiling, ``lazymlir.kernel_count``) of real traces, always with
eager's values and the proof that the graph was compiled.  Fusion on (the
default) against ``config.patch(fusion=False)``: same values, more kernels."""

import os

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import config, metrics


def run(fn, *args, rtol=1e-5, atol=1e-5, **options):
    """fn on the lazy device, one compiled graph, against eager; its kernel count."""
    with config.patch(**options):
        lazy_args = [a.to("lazy") for a in args]
        lazymlir.mark_step()
        metrics.reset()
        out = fn(*lazy_args)
        lazymlir.mark_step()
        expected = fn(*args)
        torch.testing.assert_close(out.cpu(), expected, rtol=rtol, atol=atol)
        assert (out.shape, out.stride()) == (expected.shape, expected.stride())
        assert_compiled()
        kernels = lazymlir.kernel_count(out)
        assert kernels == lazymlir.kernel_count()  # the last graph run is this one
        if metrics.counter_value("UncachedCompile"):
            assert metrics.sample_values("KernelCount") == [kernels]
        return kernels


def chain10(x, y):
    # 10 ops: mul, add, relu, mul, sub, abs, add, sqrt, mul, sigmoid
    return torch.sigmoid((((x * 2.0 + 1.0).relu() * y - 0.5).abs() + 1.0).sqrt() * 3.0)


def test_elementwise_chain_is_one_kernel(native_built):
    x, y = torch.randn(4096), torch.randn(4096)
    assert run(chain10, x, y) == 1
    # Unfused, each op is its own loop nest (relu two: its compare and its
    # select, which keeps eager's -0.0): same values.
    assert run(chain10, x, y, fusion=False) == 11


def broadcast_reshape_chain(x, b):
    t = (x * 2.0 + b).relu()  # (64, 32) + (32,): a broadcast
    t = t.reshape(16, 4, 32) - 1.0  # a reshape in the middle
    return (t.exp() * 0.5).transpose(0, 1).tanh()  # a permuted result: eager's strides


def test_chain_across_broadcast_and_reshape_is_one_kernel(native_built):
    x, b = torch.randn(64, 32), torch.randn(32)
    assert run(broadcast_reshape_chain, x, b) == 1
    assert run(broadcast_reshape_chain, x, b, fusion=False) > 1


def test_softmax_kernels(native_built):
    # Softmax: two reductions over each row (max, then sum of exp(x - max))
    # and one normalizing pass.  lazymlir-fuse-row-reductions runs all three
    # (and the reductions' accumulator fills) tile of rows by tile of rows in
    # one loop nest, so the input is read from memory once: one kernel.
    # Without fusion every op is a kernel of its own.
    x = torch.randn(512, 256)
    fused = run(lambda t: torch.softmax(t, -1), x)
    assert fused == 1
    assert run(lambda t: torch.softmax(t, -1), x, fusion=False) > 5


def test_attention_with_bool_mask(native_built):
    # The mask is read as bytes (lazymlir-byte-bool-accesses), so the masked
    # softmax's row loops vectorize; rows that mask everything out give
    # zeros (_safe_softmax), as in eager.
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    mask = torch.rand(2, 1, 64, 64) > 0.3
    mask[0, 0, 5] = False  # a fully masked row
    run(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask)
    run(lambda x: (x > 0.5) & (x < 0.9), torch.rand(64, 64))  # bools stored as bytes


def test_causal_attention_with_streaming_stores(native_built):
    # Scores of two heads, written with streaming stores: the head and row
    # loops share one parallel loop (its bounds were once defined inside it,
    # and causal attention at sequence length 1024 fell back to eager).
    q, k, v = (torch.randn(1, 2, 256, 64) for _ in range(3))
    run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, streaming_store_bytes=65536)


def test_max_reductions_propagate_nan(native_built):
    # Max/min reductions may return either zero when -0.0 and +0.0 tie (as
    # eager's vectorized max may), but a NaN anywhere in a row propagates.
    x = torch.randn(64, 256)
    x[3, 17] = x[5, 0] = x[7, 255] = float("nan")
    x[9] = 0.0
    x[9, ::2] = -0.0
    lx = x.to("lazy")
    lazymlir.mark_step()
    outs = [lx.amax(-1), lx.amin(-1), torch.softmax(lx, -1)]
    lazymlir.mark_step()
    for out, expected in zip(outs, [x.amax(-1), x.amin(-1), torch.softmax(x, -1)]):
        torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
    assert outs[0].cpu()[[3, 5, 7]].isnan().all() and outs[2].cpu()[3].isnan().all()
    assert_compiled()


def test_layer_norm_kernels(native_built):
    # torch-mlir decomposes layer norm into three row reductions (the mean in
    # f32, and the variance in f64 from its own f64 sum), a small per-row
    # rsqrt and the normalizing pass (scale and shift fused in): all of them
    # run by tiles of rows in one kernel.  Without fusion every elementwise op
    # is a pass of its own (18).
    x, w, b = torch.randn(512, 256), torch.randn(256), torch.randn(256)
    fn = lambda t, w, b: F.layer_norm(t, (256,), w, b)  # noqa: E731
    assert run(fn, x, w, b) == 1
    assert run(fn, x, w, b, fusion=False) >= 9


def test_small_softmax_is_one_tile(native_built):
    # When all rows fit one tile, the row loop folds away and the reductions
    # stay separate loop nests over data already in cache.
    assert run(lambda t: torch.softmax(t, -1), torch.randn(64, 128)) <= 5


def test_matmul_bias_relu_is_one_kernel(native_built):
    x, w, b = torch.randn(32, 64), torch.randn(64, 48), torch.randn(48)
    fn = lambda x, w, b: F.relu(x @ w + b)  # noqa: E731
    assert run(fn, x, w, b, rtol=1e-4, atol=1e-4) == 1
    assert run(fn, x, w, b, rtol=1e-4, atol=1e-4, fusion=False) == 4  # relu: compare, select


def conv_block(x, w, b):
    return F.relu(F.conv2d(x, w, b, padding=1)) + x


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc_pass", "no_pass"])
def test_conv_bias_relu_residual_fused(native_built, channels_last, batch):
    x, w, b = torch.randn(batch, 8, 16, 16), torch.randn(8, 8, 3, 3) / 8, torch.randn(8)
    fused = run(conv_block, x, w, b, rtol=1e-4, atol=1e-4, channels_last=channels_last)
    unfused = run(conv_block, x, w, b, rtol=1e-4, atol=1e-4, channels_last=channels_last, fusion=False)
    # The bias (the conv's accumulator init), the relu and the residual add
    # are no loop nests of their own: they run in the conv's tiled nest.
    assert fused <= unfused - 3, (fused, unfused)


def test_kernel_count_api_and_metrics(native_built, fresh_cache, tmp_path):
    x, y = torch.randn(256), torch.randn(256)
    with config.patch(dump_dir=str(tmp_path)):
        assert run(chain10, x, y) == 1
    assert "Metric: KernelCount" in metrics.metrics_report()
    # Every dump file of the graph is headed by its kernel count.
    files = sorted(os.listdir(tmp_path))
    assert {f.split(".", 1)[1] for f in files} == {"torch.mlir", "linalg.mlir", "llvm.mlir"}, files
    for f in files:
        with open(tmp_path / f) as fh:
            assert fh.readline() == "// lazymlir: 1 kernels (loop nests) after fusion\n", f
    llvm = next(f for f in files if f.endswith(".llvm.mlir"))
    assert "lazymlir.kernel_count = 1" in (tmp_path / llvm).read_text()
    # A cache hit: the same count, no new sample.
    assert run(chain10, x, y) == 1
    assert metrics.counter_value("CachedCompile") == 1 and metrics.sample_values("KernelCount") == []
    # User data was computed by no graph.
    assert lazymlir.kernel_count(x.to("lazy")) is None
