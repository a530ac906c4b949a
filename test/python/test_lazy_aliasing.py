"""Aliasing semantics, case by case against eager: writes through views,
in-place metadata changes, .data, detach_, copy_ between devices.  Every case
runs the same function on CPU and on the lazy device and compares every tensor
it returns (values, shapes, strides, storage offsets): mutations must be
visible through every alias, exactly as in eager."""

import warnings

import pytest
import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics


def _compare(ref, out):
    if isinstance(ref, torch.Tensor):
        assert out.device.type == "lazy", out.device
        assert (out.shape, out.stride(), out.storage_offset(), out.dtype) == (
            ref.shape,
            ref.stride(),
            ref.storage_offset(),
            ref.dtype,
        )
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-6, atol=1e-6)
    elif isinstance(ref, (list, tuple)):
        assert len(ref) == len(out)
        for r, o in zip(ref, out):
            _compare(r, o)
    else:
        assert ref == out


def check(fn, *inputs, fallbacks=()):
    """fn on CPU and on the lazy device (inputs moved there), compiled; only the
    ops in ``fallbacks`` may run eagerly."""
    ref = fn(*[i.clone() for i in inputs])
    lazy_inputs = [i.to("lazy") for i in inputs]
    lazymlir.mark_step()
    metrics.reset()
    out = fn(*lazy_inputs)
    lazymlir.mark_step()
    _compare(ref, out)
    if metrics.counter_value("Sync"):
        assert_compiled(*fallbacks)


CASES = {
    "setitem_column": lambda x: (x.__setitem__((slice(None), 0), 1.0), x)[1],
    "setitem_row_tensor": lambda x: (x.__setitem__(1, x[2] * 2), x)[1],
    "view_add_": lambda x: (x.view(-1).add_(1), x)[1],
    "view_of_view_mul_": lambda x: (x[1:][:, 1:3].mul_(-2), x)[1],
    "step_slice_fill_": lambda x: (x.view(-1)[::3].fill_(7.0), x)[1],
    "select_then_sibling": lambda x: (lambda r, c: (r.add_(10), c.mul_(3), x, r, c)[2:])(x[0], x[:, 1]),
    "transpose_view_write": lambda x: (x.t()[1].zero_(), x)[1],
    "unsqueeze_squeeze_write": lambda x: (x.unsqueeze(0).squeeze(0)[2].sub_(1), x)[1],
    "permute_write": lambda x: (x.reshape(2, 2, 3).permute(2, 0, 1)[0].add_(5), x)[1],
    "relu_inplace_on_view": lambda x: (torch.relu_(x[1:]), x)[1],
    "out_into_view": lambda x: (torch.mul(x[0], 2, out=x[2]), x)[1],
    "clamp_inplace_then_read_alias": lambda x: (lambda v: (v.clamp_(-0.5, 0.5), x.sum(), v)[1:])(x.view(3, 4)),
    "split_chunk_writes": lambda x: (x.split(1)[1].mul_(0), x.chunk(2, 1)[1].add_(1), x)[2],
    "unbind_write": lambda x: (x.unbind(1)[3].fill_(-1), x)[1],
    "write_then_view_reads_new_value": lambda x: (lambda v: (x.add_(1), v * 1)[1])(x[1:, ::2]),
    "inplace_dtype_cast": lambda x: (
        x.mul_(torch.tensor(2)),
        x.add_(torch.ones(4, dtype=torch.float64, device=x.device)),
        x,
    )[2],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_write_through_views(native_built, name):
    check(CASES[name], torch.randn(3, 4))


def test_diagonal_write(native_built):
    # diagonal_scatter: decomposed (lowering/indexing.py) into a scatter, compiled.
    check(lambda x: (x.diagonal().fill_(-1), x)[1], torch.randn(4, 4))


@pytest.mark.parametrize("op", ["transpose_(0, 1)", "t_()", "unsqueeze_(1)", "squeeze_()", "swapdims_(0, 1)"])
def test_inplace_metadata_ops(native_built, op):
    """x.transpose_() etc. change x's sizes and strides; x keeps sharing its
    storage with the views made before, and later writes reach them."""

    def f(x):
        y = x.clone()
        before = y[1:]  # a view taken before the metadata change
        eval("y." + op)
        y.mul_(2)
        return y, before, y.sum(0)

    check(f, torch.randn(3, 4) if "squeeze" not in op else torch.randn(3, 1, 4))


def test_as_strided_inplace():
    x = torch.arange(12.0)

    def f(x):
        y = x.clone()
        y.as_strided_((2, 3), (1, 4), 1)
        y.add_(100)
        return y

    ref = f(x)
    out = f(x.to("lazy"))
    _compare(ref, out)


def test_data_assignment(native_built):
    def f(x):
        p = torch.nn.Parameter(x.clone())
        alias = p.data  # shares p's storage
        alias.mul_(3)
        q = p.detach()
        p.data = x * 10  # p now holds a new tensor; the old aliases keep the old one
        p.data.add_(1)
        return p.detach(), alias, q

    check(f, torch.randn(2, 3))


def test_detach_and_detach_inplace(native_built):
    def f(x):
        w = x.clone().requires_grad_()
        y = w * 2
        d = y.detach()
        d.add_(1)  # detach shares storage: y sees it
        z = y * 1
        z.detach_()
        z.sub_(5)
        assert not z.requires_grad and y.requires_grad
        return y.detach(), d, z

    check(f, torch.randn(5))


def test_copy_between_devices(native_built):
    x = torch.randn(3, 4)
    cpu = torch.zeros(3, 4)
    lazy = torch.zeros(3, 4, device="lazy")
    lazy[1].copy_(x[2])  # CPU -> lazy view
    lazy[:, 3].copy_(torch.arange(3.0))
    cpu[0].copy_((lazy[1] * 2))  # lazy -> CPU view
    ref = torch.zeros(3, 4)
    ref[1].copy_(x[2])
    ref[:, 3].copy_(torch.arange(3.0))
    expected_cpu = torch.zeros(3, 4)
    expected_cpu[0].copy_(ref[1] * 2)
    torch.testing.assert_close(lazy.cpu(), ref)
    torch.testing.assert_close(cpu, expected_cpu)
    src = x.clone()
    snap = src.to("lazy")
    src.add_(1)  # the lazy copy is a snapshot
    torch.testing.assert_close(snap.cpu(), x)


def test_alias_survives_mark_step(native_built):
    x = torch.randn(4, 4).to("lazy")
    v = x[1:3]
    lazymlir.mark_step()
    v.add_(1)
    lazymlir.mark_step()
    w = x.t()
    w[0].zero_()
    ref = x.cpu().clone()
    torch.testing.assert_close(v.cpu(), ref[1:3])
    assert torch.count_nonzero(ref[:, 0]) == 0


def test_autograd_sees_inplace_modification():
    """Version counters are autograd's: modifying a saved tensor raises in
    backward, as in eager."""
    for device in ("cpu", "lazy"):
        w = torch.randn(3).to(device).requires_grad_()
        y = w.exp()
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_inplace_on_leaf_requiring_grad_raises():
    w = torch.randn(3).to("lazy").requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.add_(1)
    with torch.no_grad():
        w.add_(1)  # what optimizers do
    assert w.requires_grad


def test_boolean_mask_assignment():
    x = torch.randn(4, 5)
    ref = x.clone()
    ref[ref > 0] = 0
    lx = x.to("lazy")
    lx[lx > 0] = 0  # data-dependent: may run eagerly, must be exact
    torch.testing.assert_close(lx.cpu(), ref)


# Channels-last tensors: device data keeps the NHWC storage; views, writes
# through views and in-place ops must alias exactly as in eager (strides and
# offsets included), and results keep eager's memory format.
CL_CASES = {
    "select_channel_write": lambda x: (x[:, 1].add_(1), x)[1],
    "narrow_fill": lambda x: (x.narrow(2, 1, 2).fill_(0.0), x)[1],
    "permute_to_nhwc_view_write": lambda x: (lambda v: (v[..., 0].mul_(2), x, v)[1:])(x.permute(0, 2, 3, 1)),
    "transpose_write": lambda x: (x.transpose(1, 3)[0].zero_(), x)[1],
    "relu_inplace": lambda x: (x.relu_(), x * 2)[:2],
    "inplace_with_contiguous_operand": lambda x: (x.add_(torch.ones(2, 3, 4, 5, device=x.device)), x)[1],
    "contiguous_copy_is_not_an_alias": lambda x: (lambda c: (c.add_(1), x, c)[1:])(x.contiguous()),
    "reshape_copies": lambda x: (lambda r: (r.mul_(0), x, r)[1:])(x.reshape(2, -1)),
    "flatten_of_nhwc_view": lambda x: x.permute(0, 2, 3, 1).flatten(1) * 1,
    "to_contiguous_format_then_write": lambda x: (lambda c: (c[0].fill_(3.0), x, c)[1:])(
        x.to(memory_format=torch.contiguous_format)
    ),
    "unbind_batch_write": lambda x: (x.unbind(0)[1].sub_(5), x)[1],
    "outputs_keep_format": lambda x: (
        x.sin(),
        torch.nn.functional.max_pool2d(x, 2),
        x.sum(1, keepdim=True),
        x.mean((2, 3)),
    ),
}


@pytest.mark.parametrize("name", sorted(CL_CASES))
def test_channels_last_aliasing(native_built, name):
    check(CL_CASES[name], torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last))


def test_channels_last_as_strided_write():
    # as_strided addresses the NHWC storage; as_strided_scatter runs eagerly
    # (it lowers to TMTensor), so only the values are checked.
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)

    def f(x):
        v = x.as_strided((2, 3), (1, 3), 2)
        v.mul_(-1)
        return x, v, x.as_strided((4,), (7,), 1) * 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _compare(f(x.clone()), f(x.to("lazy")))
