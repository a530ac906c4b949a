"""The tracer: functional rewriting of views and in-place ops (mutations must
be visible through every alias, as in eager), the FX graph, the torch-mlir
lowering and the cache key."""

import pytest
import torch

import lazymlir
from lazymlir.lowering import linalg
from lazymlir.trace import ir
from lazymlir.frontend.tensor import state


def run_both(fn, *inputs):
    """fn on CPU and on the lazy device; returns (eager, lazy as CPU)."""
    ref = fn(*[i.clone() for i in inputs])
    out = fn(*[i.to("lazy") for i in inputs])
    if isinstance(ref, (tuple, list)):
        return ref, [o.cpu() for o in out]
    return ref, out.cpu()


def check(fn, *inputs):
    ref, out = run_both(fn, *inputs)
    torch.testing.assert_close(out, ref)


def test_inplace_on_base_and_views():
    def f(x):
        y = x.clone()
        row = y[1]
        row.add_(10)  # through a select view
        col = y.t()[2]  # a view of a view
        col.mul_(-1)
        y.view(-1)[0] = 5.0  # through a reshape-like view
        y[:, 0].zero_()
        return y, row, col

    check(f, torch.randn(4, 3))


def test_mutation_visible_through_all_aliases():
    def f(x):
        y = x.clone()
        a = y[1:3]
        b = y[2]
        a.fill_(7.0)  # b (row 2) must see it
        b += 1
        return y, a, b, y.sum()

    check(f, torch.randn(5, 2))


def test_split_unbind_chunk_writes():
    def f(x):
        y = x.clone()
        p, q = y.split(2)
        q.mul_(0)
        r = y.unbind(1)[0]
        r.sub_(3)
        c = y.chunk(2, dim=1)[1]
        c.add_(1)
        return torch.cat([y, p]), p, q

    check(f, torch.randn(4, 2))


def test_detach_shares_storage():
    def f(x):
        y = x.clone()
        d = y.detach()
        d.add_(1)
        return y

    check(f, torch.randn(3))


def test_inplace_dtype_and_broadcast():
    def f(x, i):
        x = x.clone()
        x.add_(torch.ones(3, device=x.device))  # broadcast source (a CPU one is refused, as on CUDA)
        i = i.clone()
        i.mul_(2.0) if False else i.add_(3)
        z = torch.zeros(2, 3, dtype=torch.float64, device=x.device)
        z.copy_(x)  # dtype cast + broadcast in copy_
        z[0].copy_(torch.tensor([1.0, 2.0, 3.0]))  # a CPU source
        return x, i, z

    check(f, torch.randn(2, 3), torch.arange(6).reshape(2, 3))


def test_int_inplace_float_is_eager_error():
    i = torch.arange(3).to("lazy")
    with pytest.raises(RuntimeError):
        i.add_(1.5)


def test_transpose_clone_keeps_layout():
    def f(x):
        y = x.t().clone()  # eager keeps transposed strides
        assert y.stride() == (1, 4)
        return y.reshape(-1), y.contiguous().view(-1)

    check(f, torch.randn(3, 4))


def test_multi_output_ops():
    def f(x):
        v, i = x.max(dim=1)
        m, s = torch.var_mean(x, dim=0)
        return v, i, m, s

    check(f, torch.randn(4, 5))


def test_values_survive_mark_step():
    x = torch.randn(6)
    lx = x.to("lazy")
    y = lx * 3
    v = y[2:4]
    lazymlir.mark_step()
    v.mul_(-1)  # write into device data through a view
    lazymlir.mark_step()
    ref = x * 3
    ref[2:4] *= -1
    torch.testing.assert_close(y.cpu(), ref)
    torch.testing.assert_close(v.cpu(), ref[2:4])


def test_fx_graph_matches_eager():
    x = torch.randn(3, 4)
    w = torch.randn(5, 4)
    lx, lw = x.to("lazy"), w.to("lazy")
    out = torch.nn.functional.linear(lx, lw).relu().sum(0) * 0.5
    graph = ir.collect([state(out).storage.base])
    gm = ir.to_fx(graph)
    got = gm(*graph.input_values())[0]
    torch.testing.assert_close(got, torch.nn.functional.linear(x, w).relu().sum(0) * 0.5)
    assert any(n.op == "placeholder" for n in gm.graph.nodes)


def test_lowering_to_linalg():
    x = torch.randn(2, 3).to("lazy")
    out = (x.exp() + 1).sum(1)
    graph = ir.collect([state(out).storage.base])
    lowered = linalg.lower(ir.to_fx(graph), graph.input_values())
    assert "func.func @main" in lowered.linalg and "linalg." in lowered.linalg
    assert "torch.aten" not in lowered.linalg
    assert "torch.aten" in lowered.torch_mlir


def _key(fn):
    x = torch.ones(4).to("lazy")
    lazymlir.mark_step()
    return ir.collect([state(fn(x)).storage.base]).key


def test_key_distinguishes_constants():
    assert _key(lambda x: x + 1) != _key(lambda x: x + 1.0)
    assert _key(lambda x: x.clamp(0.0)) != _key(lambda x: x.clamp(-0.0))
    assert _key(lambda x: x.clamp(2.0)) == _key(lambda x: x.clamp(2.0))
    assert _key(lambda x: x.clamp(float("nan"))) == _key(lambda x: x.clamp(float("nan")))
    assert _key(lambda x: x.sum(0)) != _key(lambda x: x.sum(0, keepdim=True))


def test_arithmetic_floats_are_graph_inputs():
    """Floats given to arithmetic ops (learning rates, Adam's bias corrections)
    are lifted into 0-dim inputs, out of the key: no recompilation per value."""
    assert _key(lambda x: x * 0.3) == _key(lambda x: x * 0.7)
    assert _key(lambda x: x.add(x, alpha=-0.01)) == _key(lambda x: x.add(x, alpha=-0.02))
    assert _key(lambda x: torch.addcdiv(x, x, x + 1, value=0.5)) == _key(
        lambda x: torch.addcdiv(x, x, x + 1, value=-3.0)
    )
    assert _key(lambda x: x * 2) != _key(lambda x: x * 2.0)  # ints stay constants
    i = torch.arange(4).to("lazy")
    lazymlir.mark_step()
    assert ir.collect([state(i * 3).storage.base]).scalars == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lifted_floats_compute_as_eager(dtype):
    x = torch.randn(5, dtype=dtype)
    t1, t2 = torch.randn(5, dtype=dtype), torch.rand(5, dtype=dtype) + 0.5

    def f(x, t1, t2):
        return (
            x * 0.1,
            x / 3.7,
            x.add(t1, alpha=-0.3),
            x.sub(0.25),
            torch.addcdiv(x, t1, t2, value=-0.01),
            torch.addcmul(x, t1, t2, value=0.7),
            torch.lerp(x, t1, 0.9),
            torch.lerp(x, t1, 0.2),
            x * 1e-300 if dtype == torch.float64 else x * 1e-30,
        )

    ref = f(x, t1, t2)
    out = f(x.to("lazy"), t1.to("lazy"), t2.to("lazy"))
    for r, o in zip(ref, out):
        assert o.dtype == dtype
        torch.testing.assert_close(o.cpu(), r, rtol=2e-7 if dtype == torch.float32 else 1e-13, atol=1e-16)


def test_lifted_zeros_keep_their_sign():
    """Lifted scalars are cached by value: -0.0 and 0.0 (equal as floats) are
    different inputs, and the cached tensors stay what they were."""
    x = torch.tensor([1.0, -2.0, 3.0])
    lx = x.to("lazy")
    for scale in (0.0, -0.0, 0.0, -0.0):
        out = (lx * scale).cpu()
        assert torch.equal(torch.signbit(out), torch.signbit(x * scale)), scale


def test_batch_norm_training_updates_running_stats():
    """native_batch_norm mutates running stats without saying so in its schema."""
    ref = torch.nn.BatchNorm1d(3)
    lazy = torch.nn.BatchNorm1d(3).to("lazy")
    for _ in range(2):
        x = torch.randn(5, 3)
        with torch.no_grad():
            expected = ref(x)
            got = lazy(x.to("lazy"))
        lazymlir.mark_step()
        torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(lazy.running_mean.cpu(), ref.running_mean)
    torch.testing.assert_close(lazy.running_var.cpu(), ref.running_var)
    assert int(lazy.num_batches_tracked.cpu()) == 2


def test_as_strided_addresses_the_storage():
    def f(x):
        y = x.clone()
        v = y[1:]  # a view at storage offset 4
        a = v.as_strided((2, 2), (1, 4), 5)  # absolute storage addressing
        a.mul_(10)
        return y, a

    check(f, torch.arange(16.0).reshape(4, 4))


def test_diagonal_write():
    def f(x):
        y = x.clone()
        y.diagonal().fill_(-1)
        return y * 2

    check(f, torch.randn(4, 4))


def _collect(t, full=False):
    return ir.collect([state(t).storage.base], full=full)


def test_a_key_seen_before_is_not_built_again():
    """A trace whose structure was seen before (signatures, input positions,
    leaves' sizes, strides and dtypes, outputs) gets the key built then (the
    same object; no tuple per node), with its lifted floats as this trace's
    scalars; a different constant, shape or layout is a different key."""
    x = torch.randn(4, 3).to("lazy")
    xt = torch.randn(3, 4).to("lazy").t()
    lazymlir.mark_step()

    def step(x, scale, dim):  # ones: a factory, recorded by a Python handler each time
        return (x * scale).relu().sum(dim) + torch.ones(x.shape[1 - dim], device="lazy")

    first = _collect(step(x, 0.5, 0), full=True)
    again = _collect(step(x, -2.0, 0))
    assert again.key is first.key and again.lifted is None and first.lifted
    assert [v for v, _ in again.scalars] == [-2.0] and [v for v, _ in first.scalars] == [0.5]
    assert _collect(step(x, -2.0, 0), full=True).key == first.key
    assert _collect(step(x, 0.5, 1)).key != first.key
    assert _collect(step(xt, 0.5, 0)).key != first.key  # same shape, transposed strides
    assert _collect(step(x.double(), 0.5, 0)).key != first.key


def test_a_key_seen_before_whose_graph_left_the_cache_compiles_again(native_built):
    """The fingerprint gives a key the cache no longer has (cleared): the
    step collects in full and compiles; values are eager's."""
    from lazymlir import cache

    x = torch.randn(8)
    lx = x.to("lazy")
    for scale in (0.5, 0.25, 4.0):
        if scale == 4.0:
            cache.clear()
        out = (lx * scale).exp().sum()
        lazymlir.mark_step()
        torch.testing.assert_close(out.cpu(), (x * scale).exp().sum())
    assert cache.stats().misses >= 1


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


VIEW_WRITES = {
    "slice": lambda x: x[:, 1:3].mul_(2.0),
    "select": lambda x: x[1].add_(1.5),
    "transpose": lambda x: x.t().sub_(x.t() * 0.5),
    "view": lambda x: x.view(12).mul_(-1.0),
    "diagonal": lambda x: x[:3].diagonal().add_(10.0),
    "slice of a select": lambda x: x[2][1:].clamp_(min=0.0),
    "narrow of a transpose": lambda x: x.t()[1:3].add_(1.0),
    "copy into a slice": lambda x: x[:, :2].copy_(x[:, 2:] * 2),  # a KV cache's write
    "copy": lambda x: x.copy_(x.t().reshape(3, 4)),
}


@pytest.fixture
def no_eager_marks():
    """No op marked to run eagerly (earlier tests may have marked some: a
    write through a view whose ops are marked is recorded in Python)."""
    from lazymlir.frontend import tensor

    saved = dict(tensor._eager_dtypes)
    tensor._eager_dtypes.clear()
    tensor.forget_handler()
    yield
    tensor._eager_dtypes.update(saved)
    tensor.forget_handler()


@pytest.mark.parametrize("name", sorted(VIEW_WRITES))
def test_writes_through_views_recorded_in_cpp(no_eager_marks, name):
    """An in-place op (or copy_ of a tensor of the same shape and dtype) on a
    view, once its first call is known, is recorded by the C++ fast path
    (scatter nodes from _write_recipes): every alias sees the write, as in
    eager, and no op reaches Python."""
    write = VIEW_WRITES[name]
    for step in range(3):
        x = torch.randn(3, 4)
        lx = x.to("lazy")
        alias = lx.view(4, 3)
        with _PythonCalls() as calls:
            write(lx)
        write(x)
        if step:
            assert calls.ops == [], calls.ops
        torch.testing.assert_close(lx.cpu(), x)
        torch.testing.assert_close(alias.cpu(), x.view(4, 3))


def test_a_write_through_a_view_whose_scatter_runs_eagerly_stays_in_python(no_eager_marks):
    """slice_scatter marked to run eagerly (as when it does not lower for a
    dtype): writes through slices are recorded by Python, which computes
    that scatter eagerly; values are eager's."""
    from lazymlir.frontend import ops

    x = torch.randn(3, 4)
    lx = x.to("lazy")
    lx[:, 1:3].mul_(2.0)  # recipes made and kept
    ops._run_eagerly_from_now_on((torch.ops.aten.slice_scatter.default, (torch.float32, torch.float32)))
    try:
        with _PythonCalls() as calls:
            lx[:, 1:3].mul_(2.0)
        assert calls.ops == ["aten.mul_.Tensor"]
        x[:, 1:3].mul_(4.0)
        torch.testing.assert_close(lx.cpu(), x)
    finally:
        ops._forget_eager(torch.ops.aten.slice_scatter.default)


def test_ops_on_tensor_lists_recorded_in_cpp():
    """cat and stack (a KV cache grows by cat every token) take the fast path
    once their first call is known; values are eager's."""
    for step in range(3):
        a, b = torch.randn(2, 3), torch.randn(2, 5)
        la, lb = a.to("lazy"), b.to("lazy")
        with _PythonCalls() as calls:
            cat = torch.cat([la, lb * 2], 1)
            stacked = torch.stack([la, la.exp()])
        if step:
            assert calls.ops == [], calls.ops
        torch.testing.assert_close(cat.cpu(), torch.cat([a, b * 2], 1))
        torch.testing.assert_close(stacked.cpu(), torch.stack([a, a.exp()]))


def test_casts_factories_and_splits_recorded_in_cpp(no_eager_marks):
    """A cast on the device (``.to(dtype, copy=True, device=...)``: Hugging
    Face's logits), factories on the lazy device (arange, full,
    scalar_tensor) and split (GPT-2's q/k/v) take the fast path once their
    first call is known: a decode step sent each of them through Python.
    Split's pieces stay views of their base (a write through one is seen by
    the base, as in eager); lazy:1 is still refused."""
    for step in range(3):
        x = torch.randn(2, 9)
        lx = x.to("lazy")
        with _PythonCalls() as calls:
            cast = lx.to(copy=True, dtype=torch.float64, device=lx.device)
            ar = torch.arange(2, 7, device="lazy")
            full = torch.full((2,), False, dtype=torch.bool, device="lazy")
            scalar = torch.ops.aten.scalar_tensor.default(3.0, dtype=torch.float32, device=torch.device("lazy"))
            q, k, v = lx.split(3, dim=1)
            k.mul_(2.0)
        if step:
            assert calls.ops == [], calls.ops
        ref = x.clone()
        rq, rk, rv = ref.split(3, dim=1)
        rk.mul_(2.0)
        torch.testing.assert_close(cast.cpu(), x.double())
        torch.testing.assert_close(ar.cpu(), torch.arange(2, 7))
        torch.testing.assert_close(full.cpu(), torch.zeros(2, dtype=torch.bool))
        torch.testing.assert_close(scalar.cpu(), torch.tensor(3.0))
        torch.testing.assert_close(v.cpu(), rv)
        torch.testing.assert_close(lx.cpu(), ref)  # the write through k
    with pytest.raises(RuntimeError, match="single lazy device"):
        torch.arange(2, 7, device="lazy:1")


def test_indexing_with_lazy_index_tensors_recorded_in_cpp(no_eager_marks):
    """``x[idx]`` and ``x[:, idx]`` (index.Tensor: a list of lazy tensors
    and Nones; Hugging Face's position and cache indexing) take the fast
    path once their first call is known; a boolean mask, whose result size
    depends on the values, still goes through Python, with eager's values."""
    for step in range(3):
        x = torch.randn(4, 6)
        idx = torch.tensor([3, 0, 3])
        lx, lidx = x.to("lazy"), idx.to("lazy")
        with _PythonCalls() as calls:
            rows = lx[lidx]
            cols = lx[:, lidx] * 2
        if step:
            assert calls.ops == [], calls.ops
        torch.testing.assert_close(rows.cpu(), x[idx])
        torch.testing.assert_close(cols.cpu(), x[:, idx] * 2)
    mask = x > 0
    torch.testing.assert_close(lx[mask.to("lazy")].cpu(), x[mask])
