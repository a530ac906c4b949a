"""The native backend on its own: torch-mlir exports a module to
linalg-on-tensors, lazymlir.execution.native compiles it with MLIR 22 and runs it on
torch tensors in place; results must match eager PyTorch."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lazymlir.execution import native

fx = pytest.importorskip("torch_mlir.fx")


def export(module: nn.Module, *args) -> str:
    return str(fx.export_and_import(module.eval(), *args, output_type="linalg-on-tensors", func_name="main"))


def compile_and_run(module: nn.Module, *args, fusion: bool = True):
    exe = native.compile_linalg(export(module, *args), fusion=fusion)
    with torch.no_grad():
        expected = module(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    outputs = [torch.empty_like(e, memory_format=torch.contiguous_format) for e in expected]
    exe.run([a.contiguous() for a in args], outputs)
    return exe, outputs, expected


class Fn(nn.Module):
    def __init__(self, fn, *submodules):
        super().__init__()
        self.fn = fn
        self.subs = nn.ModuleList(submodules)

    def forward(self, *args):
        return self.fn(self, *args)


class MatmulBiasRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 48)

    def forward(self, x):
        return torch.relu(self.linear(x))


class SmallConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=1, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


FLOAT_CASES = {
    "matmul_bias_relu": (MatmulBiasRelu(), (torch.randn(16, 64),)),
    "softmax": (Fn(lambda m, x: torch.softmax(x, dim=-1)), (torch.randn(8, 100),)),
    "log_softmax_f64": (Fn(lambda m, x: F.log_softmax(x, dim=1)), (torch.randn(4, 10, dtype=torch.float64),)),
    "conv2d_relu_pool": (SmallConv(), (torch.randn(2, 3, 16, 16),)),
    "conv_bias_relu_residual": (
        Fn(lambda m, x, w, b, r: torch.relu(F.conv2d(x, w, b, padding=1)) + r),
        (torch.randn(2, 4, 8, 8), torch.randn(8, 4, 3, 3), torch.randn(8), torch.randn(2, 8, 8, 8)),
    ),
    "strided_conv": (Fn(lambda m, x, w: F.conv2d(x, w, stride=2)), (torch.randn(1, 3, 9, 9), torch.randn(4, 3, 3, 3))),
    "layer_norm": (nn.LayerNorm(32), (torch.randn(4, 7, 32),)),
    "sum_mean_max": (Fn(lambda m, x: (x.sum(1), x.mean(0), x.amax(-1))), (torch.randn(5, 6),)),
    "broadcast": (Fn(lambda m, x, y, z: x * y + z), (torch.randn(4, 1, 8), torch.randn(3, 1), torch.randn(8))),
    "transcendental": (
        Fn(lambda m, x: torch.tanh(x) + torch.erf(x) + torch.sigmoid(x) * torch.exp(-x * x)),
        (torch.randn(64),),
    ),
    # A bool mask read in a contraction's epilogue (dropout backward): bool
    # memory must not be read as packed bits by vectorized code.
    "matmul_mask_epilogue": (
        Fn(lambda m, x, w, mask: torch.where(mask, x @ w, 0.0) * 2.0),
        (torch.randn(8, 16), torch.randn(16, 32), torch.rand(8, 32) > 0.5),
    ),
    "gelu_scalar_out": (Fn(lambda m, x: F.gelu(x).sum()), (torch.randn(3, 5),)),
    # A pad's interior is a strided copy, large enough here to run as a
    # parallel loop nest (not the runtime's memrefCopy).
    "pad_interior_copy": (Fn(lambda m, x: F.pad(x, (1, 2, 3, 4))), (torch.randn(8, 16, 40, 40),)),
}


@pytest.mark.parametrize("name", sorted(FLOAT_CASES))
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_float_modules_match_eager(name, fusion):
    torch.manual_seed(0)
    module, args = FLOAT_CASES[name]
    _, outputs, expected = compile_and_run(module, *args, fusion=fusion)
    for out, exp in zip(outputs, expected):
        torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)


def _host_has_avx512f() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def _f32_ulp(exact):
    """The f32 ulp at each value of ``exact`` (float64); denormals' for
    values below the smallest normal."""
    tiny = torch.finfo(torch.float32).tiny
    return torch.where(exact.abs() >= tiny, exact.abs(), tiny).log2().floor().sub(23).exp2()


def test_exp_over_the_whole_f32_range():
    # f32 exp is expanded into vectorizable arithmetic: inf above ~88.72, 0
    # below ~-103.97, NaN kept.  On AVX-512 (our expansion, vscalefps for
    # 2^n) within 1.5 ulp of the exact result everywhere, denormal results
    # (x in [-103.9, -87.4]) included, as eager gives them; elsewhere
    # (upstream's expansion, which clamps 2^n) within 8 ulp of normal
    # results (5.3 measured, near the ends of the range).
    specials = torch.tensor(
        [
            float("nan"),
            float("inf"),
            -float("inf"),
            0.0,
            -0.0,
            88.72,
            88.73,
            89.0,
            1e4,
            -87.3,
            -103.27,
            -103.3,
            -104.0,
            -1e4,
            1e-30,
            -1e-30,
        ]
    )
    x = torch.cat([torch.linspace(-110.0, 95.0, 1 << 20), specials])
    exe, outputs, expected = compile_and_run(Fn(lambda m, x: torch.exp(x)), x)
    got, eager = outputs[0], expected[0]
    exact = x.double().exp()
    normal = exact.abs() >= torch.finfo(torch.float32).tiny
    ulp = _f32_ulp(exact)
    finite = torch.isfinite(exact.float()) & (exact.float() != 0)
    bound = 1.5 if _host_has_avx512f() else 8.0
    assert ((got.double() - exact).abs() / ulp)[finite & (normal | _host_has_avx512f())].max() < bound
    specials_out = got[-len(specials) :]
    assert torch.equal(specials_out.isnan(), specials.isnan())
    assert torch.equal(specials_out.isinf(), eager[-len(specials) :].isinf())
    assert (specials_out[specials < -104] == 0).all()
    if _host_has_avx512f():
        denormal = (x > -103.9) & (x < -87.4)
        assert (got[denormal] > 0).all()


def test_erf_over_the_f32_range():
    # f32 erf is our expansion (approximate-math's ErfF32: a polynomial in
    # x^2 below 1, 1 - exp(-x^2) R(1/x) above): within 3 ulp of the exact
    # result (2.4 measured in numpy), the sign of -0.0 kept, +-1 at +-inf and
    # past 4, NaN kept, denormal inputs scaled by 2/sqrt(pi) like eager.
    specials = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.99999994, 3.9, 4.0, 4.1, 9.0, 1e-30, -1e-40]
    )
    x = torch.cat([torch.linspace(-6.0, 6.0, 1 << 20), specials])
    exe, outputs, expected = compile_and_run(Fn(lambda m, x: torch.erf(x)), x)
    got, eager = outputs[0], expected[0]
    exact = torch.special.erf(x.double())
    finite = torch.isfinite(x)
    assert ((got.double() - exact).abs() / _f32_ulp(exact))[finite].max() <= 3.0
    out = got[-len(specials) :]
    assert out[0].isnan() and out[1] == 1.0 and out[2] == -1.0
    assert out[3] == 0.0 and not out[3].signbit() and out[4] == 0.0 and out[4].signbit()
    assert (out[9:12] == 1.0).all()
    torch.testing.assert_close(out[1:], eager[-len(specials) + 1 :], rtol=4e-7, atol=1e-44)  # tiny: denormals


def test_integer_and_bool_ops_match_eager():
    a = torch.randint(-100, 100, (6, 5), dtype=torch.int64)
    b = torch.randint(1, 50, (5,), dtype=torch.int64)
    c = torch.randint(-9, 9, (6, 5), dtype=torch.int32)
    mask = torch.rand(6, 5) > 0.5

    def fn(m, a, b, c, mask):
        i64 = a * b - a // b + a.sum(0)
        i32 = c * 3 + c.abs()
        flags = (a > 0) & mask | (c == 0)
        return i64, i32, flags, torch.where(mask, a, b)

    _, outputs, expected = compile_and_run(Fn(fn), a, b, c, mask)
    for out, exp in zip(outputs, expected):
        assert out.dtype == exp.dtype
        assert torch.equal(out, exp)


def test_outputs_are_written_in_place():
    x = torch.randn(8, 64)
    module = MatmulBiasRelu()
    exe = native.compile_linalg(export(module, x))
    out = torch.full((8, 48), float("nan"))
    ptr = out.data_ptr()
    exe.run([x], [out])
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out, module(x).detach())


def test_signature_and_kernel_count():
    chain = Fn(lambda m, x, y: torch.exp(x * y + 1.0).neg().relu() * 2.0)
    args = (torch.randn(32, 16), torch.randn(16))
    text = export(chain, *args)
    fused = native.compile_linalg(text)
    unfused = native.compile_linalg(text, fusion=False)
    assert fused.inputs == [("f32", (32, 16)), ("f32", (16,))]
    assert fused.outputs == [("f32", (32, 16))]
    assert fused.kernel_count == 1
    assert unfused.kernel_count > 1


def test_value_returned_twice_fills_both_outputs():
    text = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<4xf32>) outs(%0 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.addf %in, %in : f32
    linalg.yield %2 : f32
  } -> tensor<4xf32>
  return %1, %1, %arg0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
"""
    x = torch.randn(4)
    outs = [torch.full((4,), float("nan")) for _ in range(3)]
    native.compile_linalg(text).run([x], outs)
    for out, expected in zip(outs, (x + x, x + x, x)):
        assert torch.equal(out, expected)


def test_keep_llvm_dialect():
    exe = native.compile_linalg(export(MatmulBiasRelu(), torch.randn(2, 64)), keep_llvm_dialect=True)
    assert "llvm.func @main" in exe.llvm_dialect
    assert native.compile_linalg(export(MatmulBiasRelu(), torch.randn(2, 64))).llvm_dialect == ""


def test_malformed_input_raises_with_diagnostics():
    with pytest.raises(native.CompileError, match=r"parsing the linalg input failed:\n.*error:"):
        native.compile_linalg("func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n  return %arg0\n")


def test_contract_violation_raises_with_diagnostics():
    text = "func.func @main(%arg0: tensor<*xf32>) -> tensor<*xf32> {\n  return %arg0 : tensor<*xf32>\n}\n"
    with pytest.raises(native.CompileError, match="argument #0 of type 'tensor<\\*xf32>' must be a ranked tensor"):
        native.compile_linalg(text)


def test_unknown_dialect_raises():
    # Unregistered ops parse (for torch-mlir's TMTensor ops), but the contract
    # check rejects any the pipeline did not lower, and a malformed TMTensor op
    # is a diagnostic too, never a crash.
    text = 'func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = "foo.bar"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n'
    with pytest.raises(native.CompileError, match="unregistered op 'foo.bar'"):
        native.compile_linalg(text)
    with pytest.raises(native.CompileError, match="operandSegmentSizes"):
        native.compile_linalg(text.replace("foo.bar", "tm_tensor.sort"))


def test_run_rejects_mismatched_buffers():
    x = torch.randn(4, 64)
    exe = native.compile_linalg(export(MatmulBiasRelu(), x))
    out = torch.empty(4, 48)
    with pytest.raises(ValueError, match="shape"):
        exe.run([torch.randn(5, 64)], [out])
    with pytest.raises(ValueError, match="element type"):
        exe.run([x.double()], [out])
    with pytest.raises(ValueError, match="not contiguous"):
        exe.run([torch.randn(64, 4).t()], [out])
    with pytest.raises(ValueError, match="expected 1 inputs and 1 outputs"):
        exe.run([x, x], [out])


def test_run_allocated_matches_run_and_checks_sizes():
    """The runtime's path: raw addresses, checked for count and byte size."""
    x = torch.randn(4, 64)
    module = MatmulBiasRelu()
    exe = native.compile_linalg(export(module, x))
    checked, raw = torch.empty(4, 48), torch.full((4, 48), float("nan"))
    exe.run([x], [checked])
    native.run_allocated(exe, [x], [raw])
    assert torch.equal(raw, checked)
    torch.testing.assert_close(raw, module(x).detach())
    with pytest.raises(ValueError, match="input #0: 1280 bytes, expected 1024 \\(f32 \\[4, 64\\]\\)"):
        native.run_allocated(exe, [torch.randn(5, 64)], [raw])
    with pytest.raises(ValueError, match="output #0: 4 bytes"):
        native.run_allocated(exe, [x], [torch.empty(1)])
    with pytest.raises(ValueError, match="expected 1 inputs and 1 outputs"):
        native.run_allocated(exe, [x, x], [raw])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64])
def test_matmul_dtypes_match_eager(dtype):
    """Tiled and vectorized contractions for integer and f64 element types."""
    a = torch.randint(-5, 5, (16, 24)).to(dtype)
    b = torch.randint(-5, 5, (24, 40)).to(dtype)
    _, (out,), (expected,) = compile_and_run(Fn(lambda m, x, y: x @ y), a, b)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("name", ["softmax", "sum_mean_max", "conv_bias_relu_residual", "matmul_mask_epilogue"])
def test_threads_match_eager(name):
    """Large kernels split across threads (OpenMP parallel loops) give eager's
    results; small ones (below the parallel threshold) stay sequential."""
    torch.manual_seed(0)
    module, args = FLOAT_CASES[name]
    exe = native.compile_linalg(export(module, *args), threads=2)
    with torch.no_grad():
        expected = module(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    outputs = [torch.empty_like(e, memory_format=torch.contiguous_format) for e in expected]
    exe.run([a.contiguous() for a in args], outputs)
    for out, exp in zip(outputs, expected):
        torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)


def test_threads_large_elementwise_chain():
    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    chain = Fn(lambda m, a, b: torch.sigmoid((a * 2.0 + 1.0).relu() * b - 0.5))
    exe = native.compile_linalg(export(chain, x, y), threads=2)
    out = torch.empty_like(x)
    for _ in range(3):  # repeated runs reuse the runtime's thread pool
        exe.run([x, y], [out])
        torch.testing.assert_close(out, chain(x, y))


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_threads_cover_odd_trip_counts(threads):
    """The guided schedule hands every iteration to exactly one thread, for
    trip counts the team does not divide and teams larger than the machine."""
    x = torch.randn((1 << 16) + 7)
    exe = native.compile_linalg(export(Fn(lambda m, a: a * 3.0 + 1.0), x), threads=threads)
    out = torch.full_like(x, float("nan"))
    exe.run([x], [out])
    torch.testing.assert_close(out, x * 3.0 + 1.0)


def test_threads_from_concurrent_callers():
    """Parallel kernels started from several Python threads at once (each
    caller leads its own OpenMP team) all give eager's results."""
    import concurrent.futures

    x = torch.randn(256, 1024)
    module = Fn(lambda m, a: torch.softmax(a, dim=-1))
    exe = native.compile_linalg(export(module, x), threads=2)
    expected = torch.softmax(x, dim=-1)

    def run(_):
        out = torch.empty_like(x)
        for _ in range(10):
            exe.run([x], [out])
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        for out in pool.map(run, range(6)):
            torch.testing.assert_close(out, expected)


def test_background_runs_leave_the_host_a_core():
    """A background run (the lazy device's worker) keeps one thread of its
    parallel loops asleep while the host thread is not waiting (it wakes
    when the others run out of chunks), all threads work while it waits;
    the results are eager's either way."""
    x = torch.randn((1 << 18) + 3)
    fn = Fn(lambda m, a: torch.sigmoid(a * 2.0) + a)
    exe = native.compile_linalg(export(fn, x), threads=0)
    expected = torch.sigmoid(x * 2.0) + x
    out = torch.full_like(x, float("nan"))
    exe.run([x], [out], background=True)
    torch.testing.assert_close(out, expected)
    out.fill_(float("nan"))
    with native.host_wait():
        exe.run([x], [out], background=True)
    torch.testing.assert_close(out, expected)


def test_large_softmax_row_tiles_stream_when_aligned():
    """Softmax's normalized rows, written tile by tile into a >= 16 MiB
    output, stream (non-temporal stores) from tiles that start 64-byte
    aligned; a misaligned output takes the ordinary loops: eager's values
    either way."""
    x = torch.randn(4096, 1024)
    exe = native.compile_linalg(export(Fn(lambda m, a: torch.softmax(a, -1)), x), keep_llvm_dialect=True)
    assert "nontemporal" in exe.llvm_dialect and exe.kernel_count == 1
    expected = torch.softmax(x, -1)
    aligned = torch.full((4096, 1024), float("nan"))
    assert aligned.data_ptr() % 64 == 0
    misaligned = torch.full((4096 * 1024 + 1,), float("nan"))[1:].view(4096, 1024)
    assert misaligned.data_ptr() % 64 != 0
    for out in (aligned, misaligned):
        exe.run([x], [out])
        torch.testing.assert_close(out, expected)


def test_large_elementwise_outputs_stream_when_aligned():
    """An elementwise kernel writing >= 16 MiB uses aligned non-temporal
    vector stores when its output is 64-byte aligned, and the ordinary loops
    when it is not: eager's values either way."""
    n = 4 << 20
    x, y = torch.randn(n), torch.randn(n)
    fn = Fn(lambda m, a, b: torch.sqrt((a * b).abs() + 1.0) - b)
    exe = native.compile_linalg(export(fn, x, y), keep_llvm_dialect=True)
    assert "nontemporal" in exe.llvm_dialect
    expected = torch.sqrt((x * y).abs() + 1.0) - y
    aligned = torch.full((n,), float("nan"))
    assert aligned.data_ptr() % 64 == 0
    storage = torch.full((n + 1,), float("nan"))
    misaligned = storage[1:]  # contiguous, 4 bytes past a 64-byte boundary
    assert misaligned.data_ptr() % 64 != 0
    for out in (aligned, misaligned):
        exe.run([x, y], [out])
        torch.testing.assert_close(out, expected)
