"""IEEE special values on the lazy device (issue 15): NaN, +-inf, -0.0 and
denormals come out of compiled graphs as eager PyTorch computes them.

Every case runs compiled (``assert_compiled``: a graph compiled or came from
the cache, nothing fell back to eager) and is compared with eager bit for bit
on the special values: NaN in the same places, infinities equal, zeros with
the same sign (``torch.signbit``), denormals as denormals; other finite values
at normal tolerances.  Small tensors run the compiled scalar loops, large ones
the vectorized, fused and multi-threaded kernels (row-reduction fusion,
streaming stores, contraction epilogues).

Where eager itself is inconsistent the case leaves the value out: a -0.0 /
+0.0 tie in maximum, minimum or a clamp with tensor bounds gives the second
operand in eager's vectorized loop and the first in its scalar tail, and so
does which zero amax/amin or max(dim) return; f32 GELU of +inf is NaN in eager
(its vectorized erf) and inf in f64.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics

inf, nan = math.inf, math.nan
DTYPES = [torch.float32, torch.float64]
# Special values, then ordinary ones.  1e-40 is an f32 denormal (1e-310 an f64
# one: in f32 it is 0).
SPECIAL = [
    nan,
    inf,
    -inf,
    -0.0,
    0.0,
    1e-40,
    -1e-40,
    1e-310,
    -1e-310,
    1.0,
    -1.0,
    0.5,
    -2.5,
    3.0,
    100.0,
    -100.0,
    89.5,
    -104.5,
    1e30,
    -1e30,
]
DENORMAL_EXPONENTS = [-40, -42, -44]  # f32 denormals (f64: normal)


def special(dtype, values=SPECIAL):
    return torch.tensor(values, dtype=dtype)


def assert_same(out, expected, rtol=None, atol=0.0, reference=None):
    """``out`` equals ``expected`` on special values exactly (NaN where eager
    has NaN, the same infinities, zeros of the same sign) and elsewhere at
    normal tolerances (plus 4 denormal ulps: a denormal result has few bits).
    ``reference``: the op's float64 result for a float32 one. Eager's float32
    kernels differ between CPU builds (its AVX2 gelu(-100) is +0.0, the
    AVX-512 one -0.0): where ``out`` differs from eager but is at least as
    close to the float64 result (a zero of its sign), it is not worse than
    eager and passes."""
    assert out.dtype == expected.dtype and out.shape == expected.shape, (out, expected)
    if not expected.dtype.is_floating_point:
        assert torch.equal(out, expected), (out, expected)
        return
    if rtol is None:
        rtol = 1e-5 if expected.dtype == torch.float32 else 1e-12
    atol += 4 * (2.0**-149 if expected.dtype == torch.float32 else 2.0**-1074)
    o, e = out.double(), expected.double()
    bad = o.isnan() != e.isnan()
    ordered = ~e.isnan() & ~o.isnan()
    exact = ordered & (e.isinf() | o.isinf() | ((e == 0) & (o == 0)))
    bad |= exact & ((o != e) | (o.signbit() != e.signbit()))
    close = (o - e).abs() <= atol + rtol * e.abs()
    bad |= ordered & ~exact & ~close
    if bad.any() and reference is not None:
        r = reference.double()
        as_close = ((o - r).abs() <= (e - r).abs()) & ((o != 0) | (o.signbit() == r.signbit()))
        bad &= ~(ordered & ~r.isnan() & as_close)
    if bad.any():
        where = bad.nonzero()[:8].tolist()
        rows = [f"{tuple(i)}: lazy {out[tuple(i)].item()!r} eager {expected[tuple(i)].item()!r}" for i in where]
        raise AssertionError("lazy differs from eager at\n  " + "\n  ".join(rows))


def run(fn, *args, rtol=None, atol=0.0):
    """fn compiled on the lazy device against eager; every output compared."""
    lazymlir.mark_step()
    metrics.reset()
    out = fn(*[a.to("lazy") if isinstance(a, torch.Tensor) else a for a in args])
    lazymlir.mark_step()
    expected = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    expecteds = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(outs) == len(expecteds)
    references = [None] * len(outs)
    if any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args):
        wide = fn(*[a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args])
        references = wide if isinstance(wide, (tuple, list)) else (wide,)
    for o, e, r in zip(outs, expecteds, references):
        assert_same(o.cpu(), e, rtol, atol, r if isinstance(r, torch.Tensor) and r.dtype == torch.float64 else None)
    assert_compiled()


def big(values, dtype, n=1 << 16):
    """A large tensor (vectorized, multi-threaded kernels) holding ``values``
    at scattered places among random ones."""
    x = torch.randn(n, dtype=dtype) * 4
    where = torch.randperm(n)[: len(values) * 64]
    x[where] = torch.tensor(values, dtype=dtype).repeat(64)
    return x


# ---------------------------------------------------------------- clamp


CLAMPS = {
    "both": lambda t: t.clamp(0, 1),
    "min_only": lambda t: t.clamp(min=0),
    "max_only": lambda t: t.clamp(max=0),
    "min_gt_max": lambda t: t.clamp(1, 0),
    "negzero_bound": lambda t: t.clamp(-0.0, 2.0),
    "clamp_min": lambda t: torch.clamp_min(t, 0.5),
    "clamp_max": lambda t: torch.clamp_max(t, -0.5),
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", CLAMPS)
def test_clamp_number_bounds(native_built, op, dtype):
    # torch-mlir compared with ult/ugt: a NaN input came out as the bound.
    run(CLAMPS[op], special(dtype))
    run(CLAMPS[op], big(SPECIAL, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clamp_tensor_bounds(native_built, dtype):
    # NaN input, NaN bounds (eager: NaN), min > max (eager: max); no -0.0/+0.0
    # ties (eager's vector loop and scalar tail disagree on those).
    x = special(dtype, [nan, 2.0, -2.0, 0.5, inf, -inf, 0.5, 0.5, 3.0, -3.0, -0.0, 1e-40])
    lo = special(dtype, [0.0, 0.0, 0.0, nan, 0.0, 0.0, 1.0, 0.0, 2.0, 2.0, -1.0, -1.0])
    hi = special(dtype, [1.0, 1.0, 1.0, 1.0, nan, 1.0, 0.0, nan, 1.0, 1.0, 1.0, 1.0])
    run(lambda t, a, b: t.clamp(a, b), x, lo, hi)
    run(lambda t, a: t.clamp(min=a), x, lo)
    run(lambda t, b: t.clamp(max=b), x, hi)
    run(lambda t, a, b: torch.clamp(t, a[10:11], b[:1]), x, lo, hi)  # broadcast bounds: -1, 1


# ------------------------------------------------------ maximum, minimum, fmax


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_maximum_minimum_propagate_nan(native_built, dtype):
    # torch-mlir's ogt/olt + select gave the other operand for a NaN.
    a = special(dtype, [nan, 1.0, nan, inf, -inf, -0.0, 2.0, -1e-40, 1.0, nan])
    b = special(dtype, [0.0, nan, nan, 1.0, -1.0, 1.0, -inf, 1e-40, inf, -inf])
    for fn in (torch.maximum, torch.minimum, torch.max, torch.min):
        run(fn, a, b)
        run(fn, b, a)
    run(
        lambda t: torch.maximum(t, torch.zeros((), dtype=dtype, device=t.device)), big(SPECIAL[:3] + SPECIAL[5:], dtype)
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fmax_fmin(native_built, dtype):
    # The number wins over NaN; a -0.0/+0.0 tie gives the first operand
    # (eager, in both its loops).
    a = special(dtype, [nan, 1.0, nan, -0.0, 0.0, -0.0, inf, -inf, 2.0, 1e-40])
    b = special(dtype, [0.0, nan, nan, 0.0, -0.0, -0.0, nan, nan, -inf, -1e-40])
    for fn in (torch.fmax, torch.fmin):
        run(fn, a, b)
        run(fn, b, a)


# ------------------------------------------------------------- classification


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_isfinite_isinf_isnan(native_built, dtype):
    # isfinite is x == x and |x| != inf; torch-mlir folded x == x to true.
    for fn in (
        torch.isfinite,
        torch.isinf,
        torch.isnan,
        torch.isposinf,
        torch.isneginf,
        lambda t: t == t,
        lambda t: t != t,
        lambda t: torch.eq(t, t),
    ):
        run(fn, special(dtype))
    run(torch.isfinite, big(SPECIAL, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_to_num(native_built, dtype):
    x = special(dtype)
    run(torch.nan_to_num, x)
    run(lambda t: torch.nan_to_num(t, nan=1.5, posinf=7.0, neginf=-7.0), x)
    run(lambda t: torch.nan_to_num(t, nan=-0.0), x)
    run(torch.nan_to_num, big(SPECIAL, dtype))


# ------------------------------------------------------------ where, softmax


def rows(dtype, width):
    """Rows: all -inf, -inf but one, one NaN, one +inf, all +inf, ordinary."""
    x = torch.randn(6, width, dtype=dtype)
    x[0] = -inf
    x[1] = -inf
    x[1, width // 3] = 0.25
    x[2, width // 2] = nan
    x[3, width - 1] = inf
    x[4] = inf
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [16, 1024])
def test_softmax_logsumexp_special_rows(native_built, dtype, width):
    # eager: NaN for softmax of an all -inf row, -inf for its logsumexp.
    x = rows(dtype, width).repeat(64, 1)  # 384 rows: the fused row-tile kernel
    for fn in (
        lambda t: t.softmax(-1),
        lambda t: t.log_softmax(-1),
        lambda t: t.logsumexp(-1),
        lambda t: t.softmax(0),
        lambda t: t.logsumexp(0),
    ):
        run(fn, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_where_neginf_mask(native_built, dtype):
    x = torch.randn(384, 256, dtype=dtype)
    mask = torch.rand(384, 256) > 0.5
    mask[::7] = False  # fully masked rows: softmax NaN, logsumexp -inf
    run(lambda t, m: torch.where(m, t, -inf), x, mask)
    run(lambda t, m: torch.where(m, t, -inf).softmax(-1), x, mask)
    run(lambda t, m: torch.where(m, t, -inf).logsumexp(-1), x, mask)
    run(lambda t, m: t.masked_fill(~m, -inf).log_softmax(-1), x, mask)


# ------------------------------------------------------------------ reductions


def reduction_input(dtype, width):
    x = torch.randn(8, width, dtype=dtype)
    x[0, 3] = nan
    x[1, width - 1] = nan
    x[1, 0] = inf
    x[2] = -inf
    x[3, 5] = inf
    x[3, 6] = -inf  # sum: NaN
    x[4] = inf
    x[5, 1] = x[5, width - 2] = nan  # first NaN wins argmax/argmin
    x[6, 2] = -inf
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [16, 4096])
def test_max_min_reductions(native_built, dtype, width):
    x = reduction_input(dtype, width)
    for fn in (
        lambda t: t.amax(-1),
        lambda t: t.amin(-1),
        lambda t: t.amax(0),
        lambda t: t.amin(0),
        lambda t: t.amax(),
        lambda t: t.amin(),
        lambda t: t.max(),
        lambda t: t.min(),
        lambda t: t[2:5].amax(-1),
    ):
        run(fn, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [16, 4096])
def test_arg_reductions_nan(native_built, dtype, width):
    # eager: the index of the first NaN; torch-mlir's ogt/olt select never
    # picked a NaN.
    x = reduction_input(dtype, width)
    for fn in (
        lambda t: t.argmax(-1),
        lambda t: t.argmin(-1),
        lambda t: t.argmax(0),
        lambda t: t.argmin(0),
        lambda t: t.argmax(),
        lambda t: t.argmin(),
        lambda t: t.argmax(-1, keepdim=True),
        lambda t: t.max(-1),
        lambda t: t.min(-1),
        lambda t: t.max(0, keepdim=True),
    ):
        run(fn, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [16, 4096])
def test_sum_mean_inf_nan(native_built, dtype, width):
    x = reduction_input(dtype, width)
    for fn in (
        lambda t: t.sum(-1),
        lambda t: t.mean(-1),
        lambda t: t.sum(),
        lambda t: t.sum(0),
        lambda t: t.nansum(-1),
        lambda t: t.prod(-1),
        lambda t: t.norm(dim=-1),
    ):
        run(fn, x, rtol=1e-4 if dtype == torch.float32 else 1e-10)


# ----------------------------------------------------------- sign, rounding


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sign_abs_neg_rounding(native_built, dtype):
    # trunc was sign(x) * floor(|x|): +0.0 for -0.0 (and -0.5); fmod and frac
    # followed.
    x = special(dtype, SPECIAL + [-0.5, 0.5, -1.5, 2.5])
    for fn in (
        torch.sign,
        torch.sgn,
        torch.abs,
        torch.neg,
        torch.trunc,
        torch.floor,
        torch.ceil,
        torch.round,
        torch.frac,
        lambda t: t * 0.0,
        lambda t: t + -0.0,
        lambda t: t - t,
    ):
        run(fn, x)


# ---------------------------------------------------------------- activations


ACTIVATIONS = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "elu": F.elu,
    "selu": F.selu,
    "leaky_relu": F.leaky_relu,
    "softplus": F.softplus,
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "hardsigmoid": F.hardsigmoid,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activations(native_built, op, dtype):
    # elu(-0.0) was +0.0 and elu(-1e-40) 0 (exp(x) - 1, eager: expm1);
    # softplus, mish and logsigmoid lost tiny results in f64 (log1p as
    # log(1 + x)); gelu's tanh form used 0.797724 for sqrt(2 / pi).
    run(ACTIVATIONS[op], special(dtype))
    # gelu's tanh form cancels (1 + tanh(...)) for large negative x: eager's
    # tanh and ours differ by an ulp there, so that tail is compared absolutely.
    # mish(-100) is -100 * softplus(-100), a denormal: eager's is one denormal
    # ulp from the nearest float to exp(-100) (ours is the nearest), times 100.
    atol = (1e-6 if dtype == torch.float32 else 1e-12) if op == "gelu_tanh" else 0.0
    if op == "mish" and dtype == torch.float32:
        atol = 1e-42
    run(ACTIVATIONS[op], big(SPECIAL, dtype), atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relu_gelu(native_built, dtype):
    # Not -0.0 (see test_relu_negative_zero); f32 gelu(inf) is NaN in eager.
    x = special(dtype)
    x = x[~((x == 0) & x.signbit())]  # -1e-310 is -0.0 in f32
    run(torch.relu, x)
    run(F.gelu, x if dtype == torch.float64 else x[x != inf])


def test_relu_negative_zero(native_built):
    run(torch.relu, special(torch.float32, [-0.0]))


# ------------------------------------------------------------ division, pow


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_division(native_built, dtype):
    x = special(dtype)
    zeros = torch.zeros_like(x)
    run(torch.div, x, zeros)  # 0/0, x/0, -x/0
    run(torch.div, x, -zeros)
    run(torch.div, x, x)
    run(lambda t: t / 0.0, x)
    # torch-mlir's reciprocal asserted no zero (a cf.assert: the process
    # aborted for 0 and NaN); 1 / x is a reciprocal too.
    run(torch.reciprocal, x)
    run(lambda t: 1.0 / t, x)
    run(lambda t: 2.0 / t, big(SPECIAL, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fmod_remainder(native_built, dtype):
    # fmod was a - trunc(a / b) * b: NaN for a finite a over +-inf (eager: a),
    # +0.0 for -0.0.
    a = special(dtype, [5.5, -5.5, 5.5, -5.5, 1.0, -1.0, -0.0, 0.0, inf, nan, 3.0, 0.0, -1e-40, 7.0, 1e30])
    b = special(dtype, [2.0, 2.0, -2.0, -2.0, inf, -inf, 3.0, -3.0, 2.0, 2.0, 0.0, 0.0, 1.0, nan, 3.0])
    run(torch.fmod, a, b)
    run(lambda t: torch.fmod(t, 2.0), a)
    run(lambda t: torch.fmod(t, inf), a)
    run(torch.remainder, a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pow(native_built, dtype):
    # x ** 0.5 is sqrt(x) in eager: NaN for -inf, -0.0 for -0.0.
    x = special(dtype)
    for fn in (
        lambda t: t**0.5,
        lambda t: t**-0.5,
        lambda t: t**2,
        lambda t: t**3,
        lambda t: t**-1,
        lambda t: t**-2,
        lambda t: t**0,
        lambda t: 2.0**t,
        lambda t: t**1.5,
        lambda t: t**-1.5,
    ):
        run(fn, x)
    base = special(dtype, [-0.0, -0.0, 0.0, nan, 1.0, -1.0, -1.0, inf, -inf, -inf, 0.5, 2.0, -8.0])
    exponent = special(dtype, [-1.0, -2.0, -1.0, 0.0, nan, inf, -inf, -1.0, 3.0, -3.0, inf, -inf, 1 / 3])
    run(torch.pow, base, exponent)


# ------------------------------------------------------------ transcendentals


UNARY = [
    "exp",
    "expm1",
    "exp2",
    "log",
    "log1p",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "tanh",
    "erf",
    "sigmoid",
    "sin",
    "cos",
    "atan",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", UNARY)
def test_unary_math(native_built, op, dtype):
    # f32 log and log2 read a denormal input as 2^-126 (log(1e-40) -87.3, eager
    # -92.1); f32 erf(-0.0) was +0.0; f64 expm1/log1p were exp(x) - 1 and
    # log(1 + x): 0 for -0.0 and tiny inputs.
    fn = getattr(torch, op)
    values = SPECIAL + [10.0**e for e in DENORMAL_EXPONENTS] + [1e-8, -1e-8, 1e-20]
    run(fn, special(dtype, values))
    run(fn, big(values, dtype))


@pytest.mark.parametrize("op", ["exp", "tanh", "erf", "sigmoid", "log"])
def test_contraction_epilogue_math(native_built, op):
    # The vectorized epilogue of a matmul (upstream's vector expansions):
    # special values enter through the bias.
    x, w = torch.randn(64, 32), torch.randn(32, 48)
    b = torch.randn(48) * 4
    b[: len(SPECIAL)] = torch.tensor(SPECIAL)
    fn = lambda x, w, b: getattr(torch, op)(x @ w + b)  # noqa: E731
    run(fn, x, w, b, rtol=1e-4)
