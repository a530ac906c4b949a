"""Issue 35: silent wrong values on the lazy device, each against the same
call in eager PyTorch, and the neighbours of each mistake:

1. max pooling's backward with indices the caller gives (repeated, outside
   their windows) recomputed them from the windows: they are honoured now;
   the other pooling ops that take indices (3d, adaptive, fractional
   backwards; max_unpool) match eager or run eagerly.
2. ``out=`` tensors of another shape with the right element count: arange
   (and range, linspace, logspace) keep it, as eager's kernels do; every
   other op resizes it within its storage, so its aliases see the result.
3. as_strided counts from the start of the storage after every view op
   (_unsafe_view and unsafe_split were fresh tensors), in the view's dtype
   (view(dtype), view_as_real) and with its conjugate/negative bits.

Each test compares with eager and checks lazymlir.metrics for what compiled
and what ran eagerly.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_compiled

from lazymlir import metrics
from lazymlir.frontend.tensor import state

aten = torch.ops.aten


def _lazy(*tensors):
    return [t.to("lazy") for t in tensors]


def _equal(lazy, eager):
    assert lazy.device.type == "lazy" and eager.device.type == "cpu"
    assert lazy.shape == eager.shape and lazy.dtype == eager.dtype, (lazy.shape, eager.shape)
    assert lazy.stride() == eager.stride(), (lazy.stride(), eager.stride())
    torch.testing.assert_close(lazy.cpu(), eager, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# 1. Max pooling's backward with given indices.

MP2D_CASES = {
    # the issue's: padding, overlapping windows, indices repeated and far from their windows
    "issue": ((2, 4, 7, 6), (2, 4, 6, 5), [2, 2], [1, 1], [1, 1], [1, 1], 16),
    "non_overlapping": ((2, 3, 3, 2), (2, 3, 6, 5), [2, 2], [2, 2], [0, 0], [1, 1], 30),
    "unbatched": ((3, 7, 6), (3, 6, 5), [2, 2], [1, 1], [1, 1], [1, 1], 30),
    "dilated": ((2, 2, 4, 3), (2, 2, 6, 5), [2, 2], [1, 1], [0, 0], [2, 2], 30),
}


@pytest.mark.parametrize("name", sorted(MP2D_CASES))
def test_max_pool2d_backward_honours_given_indices(native_built, name):
    grad_shape, in_shape, kernel, stride, padding, dilation, high = MP2D_CASES[name]
    grad, x = torch.randn(grad_shape), torch.randn(in_shape)
    indices = torch.randint(0, high, grad_shape)
    indices.view(-1)[::7] = -1  # eager skips -1

    def f(grad, x, indices):
        return aten.max_pool2d_with_indices_backward(grad, x, kernel, stride, padding, dilation, False, indices)

    eager = f(grad, x, indices)
    lazy = f(*_lazy(grad, x, indices))
    assert state(lazy).value.op is not aten.max_pool2d_with_indices_backward.default  # a scatter of the gradients
    _equal(lazy, eager)
    assert_compiled()


def test_max_pool2d_backward_channels_last_given_indices(native_built):
    grad, x = torch.randn(2, 3, 2, 2), torch.randn(2, 3, 3, 3).to(memory_format=torch.channels_last)
    indices = torch.randint(0, 9, (2, 3, 2, 2))

    def f(grad, x, indices):
        return aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [1, 1], [0, 0], [1, 1], False, indices)

    _equal(f(*_lazy(grad, x, indices)), f(grad, x, indices))
    assert_compiled()


def test_max_pool2d_backward_of_the_forwards_indices_keeps_the_window_gather(native_built):
    # The forward's own indices lie in their windows: the backward stays one
    # op (decompositions._max_pool2d_backward, no scatter), as in training.
    x = torch.randn(2, 3, 7, 6)
    for kernel, stride, padding in (([2, 2], [2, 2], [0, 0]), ([3, 3], [1, 2], [1, 1])):

        def f(x):
            out, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding)
            return aten.max_pool2d_with_indices_backward(out * 2, x, kernel, stride, padding, [1, 1], False, indices)

        lazy = f(x.to("lazy"))
        assert state(lazy).value.op is aten.max_pool2d_with_indices_backward.default
        _equal(lazy, f(x))
    # Through autograd (F.max_pool2d in a module's forward).
    xl = x.to("lazy").requires_grad_()
    xe = x.clone().requires_grad_()
    for t in (xl, xe):
        (F.max_pool2d(t, 2, ceil_mode=True) ** 2).sum().backward()
    _equal(xl.grad, xe.grad)
    assert_compiled()


def test_max_pool2d_backward_indices_changed_after_the_forward(native_built):
    # Indices written after the forward (or of another pooling) are no
    # longer the forward's: they are honoured as given.
    x = torch.randn(2, 3, 6, 6)

    def f(x):
        out, indices = aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        indices.sub_(1)  # in range or -1 (eager's kernel checks no bounds)
        return aten.max_pool2d_with_indices_backward(out, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)

    _equal(f(x.to("lazy")), f(x))

    def g(x):  # the forward's indices, the backward of another pooling
        out, indices = aten.max_pool2d_with_indices(x, [2, 2], [1, 1])
        return aten.max_pool2d_with_indices_backward(
            out[..., ::2, ::2], x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices[..., ::2, ::2]
        )

    lazy = g(x.to("lazy"))
    assert state(lazy).value.op is not aten.max_pool2d_with_indices_backward.default
    _equal(lazy, g(x))
    assert_compiled()


POOL_BACKWARDS = {
    "max_pool3d_with_indices_backward": (
        lambda g, x, i: aten.max_pool3d_with_indices_backward(
            g, x, [2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1], False, i
        ),
        (2, 3, 3, 3, 3),
        (2, 3, 4, 4, 4),
        64,
    ),
    "adaptive_max_pool2d_backward": (
        lambda g, x, i: aten.adaptive_max_pool2d_backward(g, x, i),
        (2, 3, 3, 3),
        (2, 3, 6, 6),
        36,
    ),
    "adaptive_max_pool3d_backward": (
        lambda g, x, i: aten.adaptive_max_pool3d_backward(g, x, i),
        (2, 3, 2, 2, 2),
        (2, 3, 4, 4, 4),
        64,
    ),
    "fractional_max_pool2d_backward": (
        lambda g, x, i: aten.fractional_max_pool2d_backward(g, x, [2, 2], [3, 3], i),
        (2, 3, 3, 3),
        (2, 3, 6, 6),
        36,
    ),
    "fractional_max_pool3d_backward": (
        lambda g, x, i: aten.fractional_max_pool3d_backward(g, x, [2, 2, 2], [2, 2, 2], i),
        (2, 3, 2, 2, 2),
        (2, 3, 4, 4, 4),
        64,
    ),
}


@pytest.mark.parametrize("name", sorted(POOL_BACKWARDS))
def test_other_pooling_backwards_with_given_indices_run_eagerly(native_built, name):
    f, grad_shape, in_shape, high = POOL_BACKWARDS[name]
    grad, x, indices = torch.randn(grad_shape), torch.randn(in_shape), torch.randint(0, high, grad_shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the first graph finds the op does not lower
        lazy = f(*_lazy(grad, x, indices))
        _equal(lazy, f(grad, x, indices))
    assert metrics.executed_fallback_ops() == [f"aten::{name}"]


def test_max_unpool_honours_indices_and_rejects_others(native_built):
    x = torch.randn(2, 3, 3, 3)
    repeated = torch.randint(0, 4, (2, 3, 3, 3))  # each plane's values to its first 4 positions
    _equal(aten.max_unpool2d(*_lazy(x, repeated), [6, 6]), aten.max_unpool2d(x, repeated, [6, 6]))
    x3 = torch.randn(2, 3, 2, 2, 2)
    i3 = torch.randint(0, 27, (2, 3, 2, 2, 2))
    _equal(
        aten.max_unpool3d(*_lazy(x3, i3), [3, 3, 3], [1, 1, 1], [0, 0, 0]),
        aten.max_unpool3d(x3, i3, [3, 3, 3], [1, 1, 1], [0, 0, 0]),
    )
    assert_compiled()
    # An index outside its (n, c) plane: eager raises; it landed in a
    # neighbouring plane (a value) before.
    for bad in (-1, 36):
        indices = torch.randint(0, 36, (2, 3, 3, 3))
        indices[0, 1, 1, 1] = bad
        with pytest.raises(RuntimeError, match="Found an invalid max index"):
            aten.max_unpool2d(x, indices, [6, 6])
        with pytest.raises(RuntimeError, match="Found an invalid max index"):
            aten.max_unpool2d(*_lazy(x, indices), [6, 6]).cpu()


# ----------------------------------------------------------------------------
# 2. out= tensors of another shape with the right number of elements.

RANGES = {
    "arange": (torch.int64, lambda o: torch.arange(start=1, end=13, out=o)),
    "arange_step": (torch.int64, lambda o: torch.arange(0, 24, 2, out=o)),
    "linspace": (torch.float32, lambda o: torch.linspace(0, 1, 12, out=o)),
    "linspace_tensors": (torch.float32, lambda o: torch.linspace(torch.tensor(0.0), torch.tensor(1.0), 12, out=o)),
    "logspace": (torch.float32, lambda o: torch.logspace(0, 1, 12, out=o)),
}


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("name", sorted(RANGES))
def test_range_factories_keep_the_out_shape(native_built, name, transposed):
    # eager's range kernels resize out= only when its element count differs
    dtype, f = RANGES[name]
    results = []
    for d in ("cpu", "lazy"):
        x = torch.zeros(4, 3, dtype=dtype, device=d).t() if transposed else torch.zeros(3, 4, dtype=dtype, device=d)
        row = x[1]
        assert f(x) is x
        results.append((x, row))
    (x, row), (xl, rowl) = results
    assert xl.shape == (3, 4)
    _equal(xl, x)
    _equal(rowl, row)
    assert_compiled()


def test_range_into_out_of_another_count_is_resized():
    for end in (6, 20):
        x, xl = torch.zeros(3, 4, dtype=torch.int64), torch.zeros(3, 4, dtype=torch.int64, device="lazy")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.arange(0, end, out=x)
            torch.arange(0, end, out=xl)
        _equal(xl, x)


OUT_OPS = {
    # structured kernels (resize_output), composites that resize_ their out, a
    # multi-output op (runs eagerly), one that runs eagerly (linalg's layout)
    "add": lambda x, out: torch.add(x, 1, out=out),
    "exp": lambda x, out: torch.exp(x, out=out),
    "mm": lambda x, out: torch.mm(x.reshape(4, 3), x[:, :3], out=out),
    "cumsum": lambda x, out: torch.cumsum(x, 0, out=out),
    "special_ndtr": lambda x, out: torch.special.ndtr(x, out=out),
    "diff": lambda x, out: torch.diff(x, out=out),
    "sort": lambda x, out: torch.sort(x.reshape(-1), out=(out, torch.zeros(12, dtype=torch.long, device=x.device))),
    "linalg_inv": lambda x, out: torch.linalg.inv(x.reshape(3, 4)[:, :3] + 3 * torch.eye(3, device=x.device), out=out),
}
EAGER_OUT_OPS = {"sort": ["aten::sort"], "linalg_inv": ["aten::_linalg_check_errors", "aten::linalg_inv_ex"]}


@pytest.mark.parametrize("layout", ["flat", "matrix", "transposed"])
@pytest.mark.parametrize("name", sorted(OUT_OPS))
def test_out_of_another_shape_is_resized_in_its_storage(native_built, name, layout):
    # eager resizes out= within its storage: a view of it taken before sees the result
    f = OUT_OPS[name]
    x = torch.randn(3, 4) if name != "diff" else torch.randn(3, 5)
    results = []
    for d in ("cpu", "lazy"):
        out = {
            "flat": lambda: torch.zeros(12, device=d),
            "matrix": lambda: torch.zeros(2, 6, device=d),
            "transposed": lambda: torch.zeros(6, 2, device=d).t(),
        }[layout]()
        if name == "linalg_inv":
            out = out[:9] if layout == "flat" else out.reshape(-1)[:9] if layout == "matrix" else out[:, :3]
        alias = out.diagonal() if out.dim() == 2 else out[::2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # eager warns resizing a non-empty out=
            f(x.to(d), out)
        results.append((out, alias))
    (out, alias), (outl, aliasl) = results
    _equal(outl, out)
    _equal(aliasl, alias)
    assert_compiled(*EAGER_OUT_OPS.get(name, ()))


def test_resize_within_the_storage_keeps_aliases(native_built):
    results = []
    for d in ("cpu", "lazy"):
        x = torch.arange(12.0, device=d).reshape(3, 4) * 2
        alias = x[1]
        x.resize_(2, 5)
        x.mul_(-1)
        y = x.t().resize_(4, 2)  # a non-contiguous view: contiguous from its offset
        results.append((x, alias, y))
    for lazy, eager in zip(results[1], results[0]):
        _equal(lazy, eager)
    assert_compiled()


# ----------------------------------------------------------------------------
# 3. as_strided counts from the start of the storage, after any view.

VIEWS = {
    "slice_unsafe_view": lambda x: aten._unsafe_view(aten.slice(x, 0, 1, 3, 1), [4, 4]),
    "unsafe_view": lambda x: aten._unsafe_view(x[1:], [4, 4]),
    "view": lambda x: aten.view(x[1:], [16]),
    "reshape_alias": lambda x: aten._reshape_alias(x[1:], [4, 4], [4, 1]),
    "expand": lambda x: x[1:2].expand(3, 2, 4),
    "permute": lambda x: x[1:].permute(2, 0, 1),
    "transpose": lambda x: x[1:].transpose(0, 2),
    "t": lambda x: x[1].t(),
    "select": lambda x: x.select(0, 1),
    "narrow": lambda x: x.narrow(2, 1, 2),
    "unfold": lambda x: x[1:].unfold(2, 2, 1),
    "diagonal": lambda x: x[1:].diagonal(0, 0, 2),
    "squeeze": lambda x: x[1:2].squeeze(),
    "unsqueeze": lambda x: x[1].unsqueeze(0),
    "unbind": lambda x: x.unbind(0)[1],
    "split": lambda x: x.split(1, 0)[2],
    "split_with_sizes": lambda x: x.split([1, 2], 0)[1],
    "split_sizes": lambda x: aten.split.sizes(x, [1, 2], 0)[1],
    "unsafe_split": lambda x: aten.unsafe_split(x, 1, 0)[1],
    "unsafe_split_with_sizes": lambda x: aten.unsafe_split_with_sizes(x, [1, 2], 0)[1],
    "unsafe_split_with_sizes_last": lambda x: aten.unsafe_split_with_sizes(x, [3, 1], 2)[0],
    "unsafe_chunk": lambda x: x.unsafe_chunk(3, 0)[2],
    "as_strided": lambda x: x.as_strided((2, 4), (4, 1), 8),
}
BASES = {
    "contiguous": lambda d: torch.arange(24.0, device=d).reshape(3, 2, 4),
    "offset": lambda d: torch.arange(30.0, device=d)[6:].reshape(3, 2, 4),
    "permuted": lambda d: torch.arange(24.0, device=d).reshape(4, 2, 3).permute(2, 1, 0),
    "channels_last": lambda d: (
        torch.arange(24.0, device=d).reshape(1, 3, 2, 4).contiguous(memory_format=torch.channels_last).squeeze(0)
    ),
}
STRIDED = [((2, 2), (8, 1), 0), ((2, 2), (3, 1), None), ((2, 3), (1, 4), 3), ((2, 2), (0, 1), 5)]


def _as_strided(v, size, stride, offset):
    return aten.as_strided(v, size, stride) if offset is None else aten.as_strided(v, size, stride, offset)


def _valid(view, base):
    try:
        VIEWS[view](BASES[base]("cpu"))
        return True
    except RuntimeError:  # e.g. a view of a permuted tensor that spans its strides
        return False


@pytest.mark.parametrize("view, base", [(v, b) for v in sorted(VIEWS) for b in sorted(BASES) if _valid(v, b)])
def test_as_strided_after_views_counts_from_the_storage(native_built, view, base):
    for size, stride, offset in STRIDED:
        results = []
        for d in ("cpu", "lazy"):
            r = _as_strided(VIEWS[view](BASES[base](d)), size, stride, offset)
            results.append((r, r * 1))  # a view of the storage, and computed in a graph
        for lazy, eager in zip(results[1], results[0]):
            _equal(lazy, eager)
    assert_compiled()


def test_as_strided_of_the_issue():
    x = torch.arange(24.0).reshape(3, 2, 4)

    def f(x):
        v = aten.slice(x, 0, 1, 3, 1)
        v = aten._unsafe_view(v, [4, 4])
        return aten.as_strided(v, size=(2, 2), stride=(8, 1), storage_offset=0)

    assert f(x).tolist() == [[0.0, 1.0], [8.0, 9.0]]
    _equal(f(x.to("lazy")), f(x))


def test_unsafe_views_alias_their_base_as_in_eager(native_built):
    results = []
    for d in ("cpu", "lazy"):
        x = torch.arange(24.0, device=d).reshape(3, 2, 4) * 1
        aten._unsafe_view(x[1:], [16]).add_(100)
        aten.unsafe_split(x, 1, 0)[0].mul_(-1)
        aten.unsafe_split_with_sizes(x, [3, 1], 2)[1].zero_()
        results.append(x)
    _equal(results[1], results[0])
    assert_compiled()


REINTERPRETED = {
    "view_int32": lambda x: x.real.view(torch.int32),
    "view_int16": lambda x: torch.view_as_real(x).view(torch.int16),
    "view_as_real": lambda x: torch.view_as_real(x),
    "imag": lambda x: x.imag,
    "view_float64": lambda x: x.view(torch.float64),
    "conj": lambda x: x.conj(),
    "neg_view": lambda x: aten._neg_view(x),
}


@pytest.mark.parametrize("name", sorted(REINTERPRETED))
def test_as_strided_in_the_views_dtype_and_bits(name):
    # offsets and strides count the view's elements; the bits stay on
    def f(d):
        x = torch.complex(torch.arange(12.0, device=d), -torch.arange(12.0, device=d)).reshape(3, 4)
        v = REINTERPRETED[name](x)
        return aten.as_strided(v, (2, 2), (8, 1), 1).resolve_conj().resolve_neg()

    _equal(f("lazy"), f("cpu"))


def test_writes_through_a_dtype_view_reach_the_storage(native_built):
    results = []
    for d in ("cpu", "lazy"):
        x = torch.arange(12.0, device=d).reshape(3, 4) * 1
        x.view(torch.int32)[1].add_(1)
        aten.as_strided(x.view(torch.int32), (2,), (5,), 1).sub_(3)
        v = x.view(torch.int32)
        x.add_(1)  # v is computed again from x
        results.append((x, v * 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the first graph finds view.dtype does not lower
        for lazy, eager in zip(results[1], results[0]):
            _equal(lazy, eager)
    # view.dtype is computed eagerly in place (it does not lower), the rest compiles
    assert_compiled("aten::view")


def test_writes_through_a_view_of_another_itemsize():
    # int16 is not a dtype graphs take: these graphs run eagerly, as a whole
    results = []
    for d in ("cpu", "lazy"):
        x = torch.arange(12.0, device=d).reshape(3, 4) * 1
        x.view(torch.int16)[:, 1] = 7
        x.view(torch.int16)[2].add_(3)
        results.append(x)
    _equal(results[1], results[0])
