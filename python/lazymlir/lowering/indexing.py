"""Decompositions of indexing ops (scatter, index_put, sort, kthvalue, the
strided and diagonal scatters, max pooling's backward and unpooling) into
ops torch-mlir lowers statically and the native compiler takes: not its
TMTensor lowerings of bool operands or negative dims, not nonzero's dynamic
shapes. ``decompositions.decomposition_table`` installs them."""

import torch

from . import LoweringError


_SCATTERS = (
    torch.ops.aten.scatter.src,
    torch.ops.aten.scatter.value,
    torch.ops.aten.scatter.reduce,
    torch.ops.aten.scatter.value_reduce,
    torch.ops.aten.scatter_add.default,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.index_add.default,
)


def _scatter_like(op, decomposed):
    """``op(self, dim, index, ...)`` with a non-negative ``dim`` and, for a
    bool ``self``, computed in int32 (the result converted back); then the
    table's own decomposition of ``op`` (``decomposed``), if any."""

    def decomposition(self, dim, *args, **kwargs):
        if op is torch.ops.aten.scatter_reduce.two and args[2] == "mean" and not self.is_floating_point():
            # torch-mlir's mean of integers rounds differently from eager's
            raise LoweringError("scatter_reduce mean of integers: torch-mlir's rounding differs from eager's")
        negative = dim < 0
        bools = self.dtype == torch.bool
        if not negative and not bools:
            return NotImplemented if decomposed is None else decomposed(self, dim, *args, **kwargs)
        dim = dim + self.dim() if negative else dim
        if not bools:
            return op(self, dim, *args, **kwargs)
        # bool tensors and scalars (index_add's alpha) as int32 and int:
        # torch-mlir crashes multiplying an i8 tensor (and converting scalars to i8) by a bool scalar
        args = [_as_int32(a) for a in args]
        kwargs = {k: _as_int32(v) for k, v in kwargs.items()}
        return op(self.to(torch.int32), dim, *args, **kwargs).to(torch.bool)

    return decomposition


def _as_int32(a):
    if isinstance(a, torch.Tensor):
        return a.to(torch.int32) if a.dtype == torch.bool else a
    return int(a) if type(a) is bool else a


def _sort_bool(self, dim=-1, descending=False):
    """torch-mlir's comparator takes i1 as signed (True < False)."""
    if self.dtype != torch.bool:
        return NotImplemented
    values, indices = torch.ops.aten.sort.default(self.to(torch.int32), dim, descending)
    return values.to(torch.bool), indices


_wrapping_index_put = False


def _index_put_wrapped(self, indices, values, accumulate):
    """index_put with integer indices, negative ones counted from the end as
    eager does: torch-mlir passes them unchanged to tm_tensor.scatter, which
    takes positions in range only (lazymlir-lower-tm-tensor flags the others
    for the runtime check, and eager's rerun raises eager's IndexError)."""
    global _wrapping_index_put
    if _wrapping_index_put:  # the index_put below: torch-mlir's own lowering
        return NotImplemented
    wrapped = [None if i is None else torch.where(i < 0, i + self.shape[d], i) for d, i in enumerate(indices)]
    bools = self.dtype == torch.bool  # TMTensor's i1 add is xor: accumulate in int32
    _wrapping_index_put = True
    try:
        if bools:
            return torch.ops.aten.index_put.default(
                self.to(torch.int32), wrapped, values.to(torch.int32), accumulate
            ).to(torch.bool)
        return torch.ops.aten.index_put.default(self, wrapped, values, accumulate)
    finally:
        _wrapping_index_put = False


def _sort_stable(self, *, stable=None, dim=-1, descending=False):
    """torch-mlir lowers sort.default only; its comparator is non-strict
    (``ole`` / ``oge``) and the native lowering (lazymlir-lower-tm-tensor's
    merge sort) keeps ties in their original order: a stable sort either way."""
    return torch.ops.aten.sort.default(self, dim, descending)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """The k-th smallest along ``dim`` from a (stable) sort: torch-mlir lowers
    kthvalue to tm_tensor.topk, which the native compiler does not take."""
    values, indices = torch.ops.aten.sort.default(self, dim, False)
    values, indices = values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def _as_strided_scatter(self, src, size, stride, storage_offset=None):
    """``src`` written at the positions the view would have in ``self``'s
    (dense, contiguous) storage: an index_put of flat indices, i.e. a
    tm_tensor.scatter."""
    flat = torch.full(list(size), storage_offset or 0, dtype=torch.int64, device=self.device)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        flat = flat + (torch.arange(n, device=self.device) * st).reshape(shape)
    out = torch.ops.aten.index_put.default(self.reshape(-1), [flat.reshape(-1)], src.to(self.dtype).reshape(-1), False)
    return out.reshape(self.shape)


def _diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    """As as_strided_scatter on the diagonal's view of a contiguous ``self``."""
    rank = self.dim()
    dim1, dim2 = dim1 % rank, dim2 % rank
    strides = [1] * rank
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * self.shape[d + 1]
    n1, n2 = self.shape[dim1], self.shape[dim2]
    if offset >= 0:
        length, start = max(min(n1, n2 - offset), 0), offset * strides[dim2]
    else:
        length, start = max(min(n1 + offset, n2), 0), -offset * strides[dim1]
    others = [d for d in range(rank) if d not in (dim1, dim2)]
    size = [self.shape[d] for d in others] + [length]
    stride = [strides[d] for d in others] + [strides[dim1] + strides[dim2]]
    return _as_strided_scatter(self, src, size, stride, start)


def _index_put(self, indices, values, accumulate=False):
    """index_put with one bool mask (``x[mask] = v``, ``x[mask] += v``):
    torch-mlir lowers it through nonzero, whose dynamic shapes the backend
    does not take.  Masked positions take ``values`` (broadcast over the
    masked elements, or the k-th masked element takes ``values[k]``: its
    rank by an inclusive cumsum of the mask), all in static shapes.  Other
    index lists are torch-mlir's (a tm_tensor.scatter)."""
    if all(i is None or not (i.dtype == torch.bool or i.dtype == torch.uint8) for i in indices):
        return _index_put_wrapped(self, indices, values, accumulate)
    if len(indices) != 1 or indices[0] is None:
        return NotImplemented
    mask = indices[0].to(torch.bool)
    m = mask.dim()
    if m == 0 or tuple(mask.shape) != tuple(self.shape[:m]):
        return NotImplemented
    trailing = list(self.shape[m:])
    t = len(trailing)
    values = values.to(self.dtype)
    full_mask = mask.reshape(list(mask.shape) + [1] * t)
    row_shape = list(values.shape[max(values.dim() - t, 0) :])
    if values.dim() <= t or values.shape[values.dim() - t - 1] == 1:
        # One value (or row) for every masked element.
        picked = values.reshape(row_shape).expand(self.shape)
    else:
        # values[k] for the k-th masked element (row-major order).
        k = values.shape[values.dim() - t - 1]
        rows = values.reshape([k] + row_shape).expand([k] + trailing)
        rank = torch.cumsum(mask.reshape(-1).to(torch.int64), 0) - 1
        rank = rank.clamp(0, k - 1)
        picked = rows.index_select(0, rank).reshape(self.shape)
    if accumulate:
        return self + torch.where(full_mask, picked, torch.zeros((), dtype=self.dtype, device=self.device))
    return torch.where(full_mask, picked, self)


def _max_unpool(self, indices, output_size, dims):
    """torch._decomp's max_unpool (an index_put of each value at its plane's
    offset plus its index) with every index outside its plane sent past the
    whole output: the index_put's runtime check then flags it and the graph
    reruns eagerly, raising eager's "Found an invalid max index"."""
    output_shape = list(self.shape[:-dims]) + list(output_size)
    if any(n == 0 for n in output_shape) or indices.shape != self.shape:
        return NotImplemented
    planes = 1
    for n in self.shape[:-dims]:
        planes *= n
    plane = 1
    for n in output_size:
        plane *= n
    base = torch.arange(planes, device=self.device).reshape(list(self.shape[:-dims]) + [1] * dims) * plane
    flat = torch.where((indices >= 0) & (indices < plane), indices + base, planes * plane)
    out = torch.zeros(planes * plane, dtype=self.dtype, device=self.device)
    out = torch.ops.aten.index_put.default(out, [flat.reshape(-1)], self.reshape(-1), False)
    return out.reshape(output_shape)


def _max_unpool2d(self, indices, output_size):
    return _max_unpool(self, indices, output_size, 2)


def _max_unpool3d(self, indices, output_size, stride, padding):
    return _max_unpool(self, indices, output_size, 3)


def _max_pool2d_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """max_pool2d's backward without scatter: each input position gathers the
    gradients of the windows whose argmax (``indices``, flat over H*W) it is.
    Only right for indices that lie in their own windows, as the forward's
    do: ops.py records this op only for indices it has seen the forward
    (max_pool2d_with_indices with the same pooling) return, and a scatter
    of the gradients at their indices for any others.
    Window offset (i, j) of output (oh, ow) reads input row oh*sh - ph + i*dh:
    compare ``indices`` with that position, then place the selected gradients
    on the input grid by zero-interleaving (pad + reshape) and shifting."""
    kh, kw = (list(kernel_size) * 2)[:2] if len(kernel_size) == 1 else kernel_size
    stride = stride or [kh, kw]
    sh, sw = (list(stride) * 2)[:2] if len(stride) == 1 else stride
    ph, pw = (list(padding) * 2)[:2] if len(padding) == 1 else padding
    dh, dw = (list(dilation) * 2)[:2] if len(dilation) == 1 else dilation
    H, W = self.shape[-2:]
    OH, OW = grad_output.shape[-2:]
    dev = grad_output.device
    zero = torch.zeros((), dtype=grad_output.dtype, device=dev)
    lead = list(grad_output.shape[:-2])
    if (sh, sw, ph, pw, dh, dw) == (kh, kw, 0, 0, 1, 1):
        # Non-overlapping windows (the common pool 2x2 stride 2): one pass over
        # a (..., OH, kh, OW, kw) view of the input grid.
        rows = torch.arange(OH * kh, device=dev).reshape(OH, kh, 1, 1)
        cols = torch.arange(OW * kw, device=dev).reshape(1, 1, OW, kw)
        pos = rows * W + cols
        hit = indices.reshape(lead + [OH, 1, OW, 1]) == pos
        g = torch.where(hit, grad_output.reshape(lead + [OH, 1, OW, 1]), zero)
        g = g.reshape(lead + [OH * kh, OW * kw])
        if OH * kh > H or OW * kw > W:  # ceil_mode's last windows end past the input: crop (no negative pad,
            g = g[..., :H, :W]  # which torch-mlir lowered to an out-of-bounds slice)
        return torch.nn.functional.pad(g, [0, W - g.shape[-1], 0, H - g.shape[-2]])
    grad_input = torch.zeros(self.shape, dtype=grad_output.dtype, device=dev)
    for i in range(kh):
        for j in range(kw):
            r = torch.arange(OH, device=dev) * sh + (i * dh - ph)
            c = torch.arange(OW, device=dev) * sw + (j * dw - pw)
            valid = ((r >= 0) & (r < H)).reshape(OH, 1) & ((c >= 0) & (c < W)).reshape(1, OW)
            pos = torch.where(valid, r.reshape(OH, 1) * W + c.reshape(1, OW), -1)
            g = torch.where(indices == pos, grad_output, zero)
            grad_input = grad_input + _place(_place(g, -2, sh, i * dh - ph, H), -1, sw, j * dw - pw, W)
    return grad_input


def _place(g, dim, step, offset, size):
    """Along ``dim``: element k of ``g`` moves to k*step + offset in a zero tensor
    of length ``size`` (elements that fall outside are dropped)."""
    n = g.shape[dim]
    g = g.unsqueeze(dim)  # (..., n, 1, ...) with the new dim right after ``dim``
    pads = [0, 0] * (-dim - 1) + [0, step - 1]  # zero-interleave
    g = torch.nn.functional.pad(g, pads)
    shape = list(g.shape)
    del shape[dim]
    shape[dim] = n * step
    g = g.reshape(shape)
    if offset < 0:
        g = g.narrow(dim, -offset, g.shape[dim] + offset)
    elif offset > 0:
        g = torch.nn.functional.pad(g, [0, 0] * (-dim - 1) + [offset, 0])
    length = g.shape[dim]
    if length > size:
        g = g.narrow(dim, 0, size)
    elif length < size:
        g = torch.nn.functional.pad(g, [0, 0] * (-dim - 1) + [0, size - length])
    return g
