"""Writes through every view the lazy device makes, alone and chained: each
view chain (reshape's ``_reshape_alias`` of a non-contiguous tensor, view,
unfold, narrow, split/chunk/unbind pieces, diagonal, expand, as_strided,
movedim, swapaxes, T/mT, unflatten, view_as_real/complex, conj, squeeze,
unsqueeze, and chains of them with slices, transposes and expands) times
in-place ops, against eager: the base, the view and another alias made
before the write (values and layouts), with every op compiled (no
``aten::`` eager counter)."""

import warnings

import pytest
import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics

aten = torch.ops.aten


def _base(d):
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 6, 8, generator=g).to(d)


def _complex_base(d):
    g = torch.Generator().manual_seed(0)
    return torch.complex(torch.randn(4, 6, 4, generator=g), torch.randn(4, 6, 4, generator=g)).to(d)


# name -> (base maker, view chain, overlapping): overlapping views (an
# element seen at several places) take only the writes eager allows on them.
CHAINS = {
    # reshape of a non-contiguous tensor that is still a view: _reshape_alias
    "reshape_alias": (_base, lambda x: x[:, 1:].reshape(4, 5, 2, 4), False),
    "reshape_alias_transposed": (_base, lambda x: x.transpose(0, 1).reshape(6, 4, 2, 4)[:, 1:3], False),
    "reshape_slice_reshape_slice": (
        _base,
        lambda x: torch.reshape(torch.reshape(x, [4, 6, 4, 2])[:, :, 1:, :], [4, 6, 6])[..., :4],
        False,
    ),
    "_reshape_alias_other_strides": (_base, lambda x: aten._reshape_alias(x[1:], [6, 8], [1, 6]), False),
    "view": (_base, lambda x: x.view(24, 8), False),
    "flatten": (_base, lambda x: x.flatten(1), False),
    "unflatten": (_base, lambda x: x.unflatten(2, (2, 4)), False),
    "unfold": (_base, lambda x: x.unfold(2, 2, 2), False),
    "unfold_of_transpose": (_base, lambda x: x.transpose(1, 2).unfold(2, 3, 3)[1:], False),
    "narrow": (_base, lambda x: x.narrow(1, 1, 3), False),
    "split": (_base, lambda x: x.split(2, 1)[1], False),
    "chunk": (_base, lambda x: x.chunk(2, 2)[1], False),
    "unbind": (_base, lambda x: x.unbind(1)[2], False),
    "tensor_split": (_base, lambda x: x.tensor_split(3, 1)[1], False),
    "diagonal": (_base, lambda x: x.diagonal(0, 1, 2), False),
    "diagonal_of_reshape": (_base, lambda x: x.reshape(4, 48)[:, 2:6].diagonal(), False),
    "expand_new_dims": (_base, lambda x: x.expand(1, 4, 6, 8), False),
    "as_strided": (_base, lambda x: x.as_strided((3, 3), (8, 1), 2), False),
    "movedim": (_base, lambda x: x.movedim(0, 2), False),
    "swapaxes": (_base, lambda x: x.swapaxes(0, 1), False),
    "T": (_base, lambda x: x[0].T, False),
    "mT": (_base, lambda x: x.mT, False),
    "alias": (_base, lambda x: aten.alias(x), False),
    "squeeze": (_base, lambda x: x[:1].squeeze(0), False),
    "unsqueeze": (_base, lambda x: x.unsqueeze(1), False),
    "step_slice": (_base, lambda x: x[..., ::3], False),
    "slice_transpose_reshape_expand": (
        _base,
        lambda x: x[1:3].transpose(1, 2).reshape(2, 2, 4, 6)[:, 1].unsqueeze(0).expand(1, 2, 4, 6),
        False,
    ),
    "permute_unfold_select": (_base, lambda x: x.permute(2, 0, 1).unfold(2, 3, 3)[1], False),
    "select_of_broadcast": (_base, lambda x: x[:, :1].expand(4, 3, 8)[:, 2], False),
    "split_movedim_reshape": (_base, lambda x: x.split(3, 1)[1].movedim(2, 0).reshape(2, 4, 4, 3), False),
    "view_as_real": (_complex_base, lambda c: torch.view_as_real(c), False),
    "view_as_complex": (_base, lambda x: torch.view_as_complex(x[:, 2:4].unflatten(2, (4, 2))), False),
    "real_of_slice": (_complex_base, lambda c: c[1:].real, False),
    "imag_of_transpose": (_complex_base, lambda c: c.transpose(0, 2).imag, False),
    "conj": (_complex_base, lambda c: c[1:].conj(), False),
    "neg_view_of_mH": (_complex_base, lambda c: aten._neg_view(c.mH), False),
    # Overlapping: a broadcast, overlapping windows.
    "expand_broadcast": (_base, lambda x: x[:, :1].expand(4, 3, 8), True),
    "expand_broadcast_of_transpose": (_base, lambda x: x.transpose(0, 2)[:, 2:3].expand(8, 5, 4), True),
    "unfold_overlapping": (_base, lambda x: x[1].unfold(1, 3, 1), True),
    "as_strided_overlapping": (_base, lambda x: x[1:].as_strided((4, 8), (0, 1), 3), True),
    "as_strided_sliding": (_base, lambda x: x.as_strided((5, 6), (2, 1), 1).t()[1:], True),
}


def _ones_like_mask(v):
    g = torch.Generator().manual_seed(1)
    return (torch.rand(v.shape, generator=g) > 0.5).to(v.device)


# name -> (write, allowed on overlapping views)
OPS = {
    "add_": (lambda v: v.add_(torch.ones(v.shape[-1:], dtype=v.dtype).to(v.device), alpha=2), False),
    "mul_": (lambda v: v.mul_(-3.0), False),
    "copy_": (lambda v: v.copy_((torch.arange(v.numel()).to(v.device).reshape(v.shape) * 0.5).to(v.dtype)), False),
    "fill_": (lambda v: v.fill_(7.0), True),
    "zero_": (lambda v: v.zero_(), True),
    "clamp_": (lambda v: v.clamp_(-0.5, 0.5), False),
    "index_put_": (
        lambda v: v.index_put_((torch.tensor([0, v.shape[0] - 1]).to(v.device),), torch.tensor(5.0).to(v.device)),
        False,
    ),
    "masked_fill_": (lambda v: v.masked_fill_(_ones_like_mask(v), -1.0), False),
    "setitem_first": (lambda v: v.__setitem__(0, 9.0), False),
    "relu_": (lambda v: torch.relu_(v), False),
}


# Complex views take no order (clamp_, relu_) and index_put_ of a real value.
_REAL_ONLY = {"clamp_", "relu_", "index_put_"}
_COMPLEX_VIEWS = {"view_as_complex", "conj", "neg_view_of_mH"}


# The fast tier: every op through these chains (a non-contiguous
# _reshape_alias; a chain of slice, transpose, reshape and expand), and one op
# through each other chain (the ops it takes, in turn from chain to chain);
# the other cases are slow.
_EVERY_OP = ("reshape_alias_transposed", "slice_transpose_reshape_expand")


def _cases():
    for i, (chain, (_, _, overlapping)) in enumerate(CHAINS.items()):
        ops = [
            op
            for op, (_, on_overlap) in OPS.items()
            if (not overlapping or on_overlap) and not (chain in _COMPLEX_VIEWS and op in _REAL_ONLY)
        ]
        for op in ops:
            fast = chain in _EVERY_OP or op == ops[i % len(ops)]
            yield pytest.param(chain, op, id=f"{chain}-{op}", marks=() if fast else pytest.mark.slow)


def _run(chain, op, d):
    make, view, _ = CHAINS[chain]
    x = make(d)
    other = x.view(-1)[5:] if not x.dtype.is_complex else x[1:]  # an alias made before the write
    v = view(x)
    OPS[op][0](v)
    return x, v, other


def _same(lazy, ref):
    assert (lazy.shape, lazy.stride(), lazy.storage_offset(), lazy.dtype) == (
        ref.shape,
        ref.stride(),
        ref.storage_offset(),
        ref.dtype,
    )
    torch.testing.assert_close(lazy.cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("chain, op", list(_cases()))
def test_write_through_view_chain(native_built, chain, op):
    ref = _run(chain, op, "cpu")
    assert ref[1].untyped_storage().data_ptr() == ref[0].untyped_storage().data_ptr()  # a view in eager
    lazymlir.mark_step()
    metrics.reset()
    out = _run(chain, op, "lazy")
    lazymlir.mark_step()
    for lazy, eager in zip(out, ref):
        _same(lazy, eager)
    if ref[0].dtype.is_complex or ref[1].dtype.is_complex:
        # Graphs of complex values do not compile (they run eagerly): the
        # write is right, through view_as_real/complex scatters.
        assert metrics.counter_value("EagerGraph") > 0
    else:
        assert_compiled()


def test_reshape_alias_of_a_slice_written_back():
    """The issue's case: reshape of a slice of a reshape, sliced, written."""
    results = []
    for d in ("cpu", "lazy"):
        x = torch.arange(240.0).reshape(2, 3, 4, 10).to(d)
        v = torch.reshape(x, [2, 3, 10, 4])[:, :, 2:, :]
        v = torch.reshape(v, [2, 3, 4, 8])[..., :4]
        v *= 2.0
        results.append(x.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


def test_overlapping_write_keeps_the_places_left_unchanged(native_built):
    """A write into some places of an expanded tensor: each element takes the
    value from the place that changed it, whichever place that is."""
    results = []
    for d in ("cpu", "lazy"):
        x = _base(d)
        e = x[:, :1].expand(4, 3, 8)
        e[:, 0, :2] = 1.0  # first places
        e[:, 2, 6:] = 2.0  # last places
        e[1, 1, 3] = float("nan")  # a middle one
        w = x.view(-1).as_strided((5, 4), (2, 1), 7)  # sliding windows
        w[3, 1:3] = -1.0
        w[1:3, 0].mul_(0.5)  # places apart, under a view whose places overlap
        results.append((x, e, w))
    for lazy, eager in zip(results[1], results[0]):
        torch.testing.assert_close(lazy.cpu(), eager, rtol=0, atol=0, equal_nan=True)


def test_masked_and_index_writes_through_a_broadcast():
    """masked_fill_ and index_put_ on an expanded tensor (eager allows and
    warns): the places they leave alone keep the element's old value."""
    results = []
    for d in ("cpu", "lazy"):
        x = _base(d)
        e = x[:1].expand(3, 6, 8)
        mask = torch.zeros(3, 6, 8, dtype=torch.bool)
        mask[2, 1:3] = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            e.masked_fill_(mask.to(d), 4.0)
            e.index_put_((torch.tensor([1]).to(d), torch.tensor([5]).to(d)), torch.tensor(-4.0).to(d))
        results.append(x)
    torch.testing.assert_close(results[1].cpu(), results[0], rtol=0, atol=0)


def test_a_fill_gets_its_value_at_its_first_write(native_built):
    """A storage made by zeros_like, ones or full and then written into
    gets its value when the write is recorded (fills.filled: an
    optimizer's zeros_like moments, so that the first step's graph is the
    next steps'): what read it before the write, the write through a view
    and the storage after it are eager's; a fill only read stays in the
    graph."""

    def fn(x):
        d = x.device
        z = torch.zeros_like(x)
        before = z + 1.0  # reads the fill before the write
        z.add_(x)
        o = torch.full((4, 6, 8), 2.0, device=d)
        o[1:3].mul_(x[1:3])  # the first write, through a view
        t = torch.ones(4, device=d) * 3.0  # never written: stays an op
        return z, before, o, t

    want = fn(_base("cpu"))
    got = fn(_base("lazy"))
    lazymlir.mark_step()
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
    assert metrics.counter_value("FilledAtWrite") == 2, metrics.metrics_report()
    assert_compiled()
