"""Upsampling (``F.interpolate``: nearest, nearest-exact, linear, bilinear,
trilinear, bicubic) and its backward as gathers, one spatial dim at a time.

Every mode is separable: along one dim, output ``o`` is a weighted sum of
input positions ``idx_t(o)`` with weights ``lam_t(o)`` (one tap for
nearest, two for linear, four for cubic), computed as eager's CPU kernels
compute them (aten/src/ATen/native/UpSample.h: the scale in the input's
float type, source index, ``guard_index_and_lambda``). The forward gathers
the taps along each dim, innermost first, summed in eager's order. The
backward is the transpose, also a gather: each input position ``i`` takes
the gradients of the outputs whose taps reach it. Those outputs are
contiguous (the taps are monotone in ``o``) and start at ``lo(i)``, the
number of outputs whose last tap lies below ``i``; a window of ``K``
outputs from there (``K`` bounds their number, from the sizes at trace
time) is gathered and weighted by the taps that hit ``i``. No scatter, no
matmul: the work is the gradient's size times ``K`` per dim.

torch-mlir lowers none of these ops (nearest 2d aside) and torch._decomp
has no backward for them; the forward's gathers are few (bicubic: 4 + 4
rather than torch._decomp's 16)."""

import math
import struct

import torch

aten = torch.ops.aten
_A = -0.75  # the cubic convolution's constant (UpSample.h)


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _scale(mode, isize, osize, align_corners, scale, double):
    """UpSample.h's area_pixel_compute_scale / compute_scales_value, rounded
    to the compute type (float unless the input is double)."""
    if mode in ("linear", "cubic") and align_corners:
        s = (isize - 1) / (osize - 1) if osize > 1 else 0.0
    else:
        s = 1.0 / scale if scale is not None and scale > 0 else isize / osize
    return s if double else _f32(s)


def _taps(mode, isize, osize, align_corners, scale, dtype, device):
    """[(idx, lam)] along one dim: int64 input positions (in range, monotone
    in the output position) and their weights (None: 1), each of length
    ``osize``. ``dtype``: the float type indices are computed in."""
    o = torch.arange(osize, device=device)
    if mode == "nearest" and osize == isize:  # eager's special cases (nearest_idx)
        return [(o, None)]
    if mode == "nearest" and osize == 2 * isize:
        return [(torch.div(o, 2, rounding_mode="floor"), None)]
    s = _scale(mode, isize, osize, align_corners, scale, dtype == torch.float64)
    of = o.to(dtype)
    if mode in ("nearest", "nearest-exact"):
        src = (of + 0.5) * s if mode == "nearest-exact" else of * s
        return [(src.floor().to(torch.int64).clamp(max=isize - 1), None)]
    src = of * s if align_corners else (of + 0.5) * s - 0.5
    if mode == "linear":
        src = src.clamp(min=0.0)
    x = src.floor().clamp(max=isize - 1)
    t = (src - x).clamp(0.0, 1.0)
    x = x.to(torch.int64)
    if mode == "linear":
        return [(x, 1.0 - t), ((x + 1).clamp(max=isize - 1), t)]
    t1, t2 = t + 1.0, 1.0 - t  # cubic (UpSample.h get_cubic_upsample_coefficients)
    w = (
        ((_A * t1 - 5.0 * _A) * t1 + 8.0 * _A) * t1 - 4.0 * _A,
        ((_A + 2.0) * t - (_A + 3.0)) * t * t + 1.0,
        ((_A + 2.0) * t2 - (_A + 3.0)) * t2 * t2 + 1.0,
        ((_A * (t2 + 1.0) - 5.0 * _A) * (t2 + 1.0) + 8.0 * _A) * (t2 + 1.0) - 4.0 * _A,
    )
    return [((x + (k - 1)).clamp(0, isize - 1), w[k]) for k in range(4)]


def _window(mode, isize, osize, align_corners, scale) -> int:
    """A bound on how many outputs' taps reach one input position, from the
    taps computed in double (two more: float rounding moves a window's ends
    by one output at most)."""
    if mode == "nearest" and osize in (isize, 2 * isize):
        return min(osize, 2)
    s = _scale(mode, isize, osize, align_corners, scale, True)
    reach = [0] * (isize + 1)  # a difference array of the outputs reaching each i
    for o in range(osize):
        if mode in ("nearest", "nearest-exact"):
            src = (o + 0.5) * s if mode == "nearest-exact" else o * s
            lo = hi = min(math.floor(src), isize - 1)
        else:
            src = o * s if align_corners else (o + 0.5) * s - 0.5
            if mode == "linear":
                src = max(src, 0.0)
            x = min(math.floor(src), isize - 1)
            lo, hi = (x, x + 1) if mode == "linear" else (x - 1, x + 2)
            lo, hi = min(max(lo, 0), isize - 1), min(max(hi, 0), isize - 1)
        reach[lo] += 1
        reach[hi + 1] -= 1
    most = running = 0
    for r in reach:
        running += r
        most = max(most, running)
    return min(osize, most + 2)


def _compute_dtype(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _along(x, d, idx):
    return torch.index_select(x, d, idx)


def _broadcast(v, d, ndim):
    shape = [1] * ndim
    shape[d] = v.shape[0]
    return v.reshape(shape)


def _forward(mode, x, output_size, align_corners, scales):
    if mode not in ("nearest", "nearest-exact") and not x.is_floating_point():
        return NotImplemented  # eager's integer (uint8) arithmetic is its own
    n = len(output_size)
    dtype = _compute_dtype(x)
    for k in reversed(range(n)):  # innermost dim first, as eager's kernels sum
        d = x.dim() - n + k
        taps = _taps(mode, x.shape[d], output_size[k], align_corners, scales[k], dtype, x.device)
        y = None
        for idx, lam in taps:
            v = _along(x, d, idx)
            if lam is not None:
                v = v * _broadcast(lam.to(x.dtype), d, x.dim())
            y = v if y is None else y + v
        x = y
    return x


def _backward(mode, g, output_size, input_size, align_corners, scales):
    n = len(output_size)
    dtype = _compute_dtype(g)
    zero = torch.zeros((), dtype=g.dtype, device=g.device)
    for k in range(n):
        d = g.dim() - n + k
        isize, osize = input_size[len(input_size) - n + k], output_size[k]
        taps = _taps(mode, isize, osize, align_corners, scales[k], dtype, g.device)
        i = torch.arange(isize, device=g.device)
        lo = (taps[-1][0].unsqueeze(0) < i.unsqueeze(1)).sum(1)  # the last tap is the largest
        out = None
        for w in range(_window(mode, isize, osize, align_corners, scales[k])):
            o = lo + w
            inside = o < osize
            o = o.clamp(max=osize - 1)
            hit = weight = None
            for idx, lam in taps:
                m = (_along(idx, 0, o) == i) & inside
                lw = m.to(dtype) if lam is None else torch.where(m, _along(lam, 0, o), 0.0)
                hit = m if hit is None else hit | m
                weight = lw if weight is None else weight + lw
            v = _along(g, d, o) * _broadcast(weight.to(g.dtype), d, g.dim())
            v = torch.where(_broadcast(hit, d, g.dim()), v, zero)
            out = v if out is None else out + v
        g = out
    return g


def _vec(mode, dims):
    def vec(x, output_size, *rest):
        align_corners, scale_factors = rest if len(rest) == 2 else (None, rest[0])
        if output_size is None:
            output_size = [int(x.shape[-dims + k] * s) for k, s in enumerate(scale_factors)]
        scales = list(scale_factors) if scale_factors else [None] * dims
        return _forward(mode, x, list(output_size), align_corners, scales)

    return vec


def _nearest(mode):
    def forward(x, output_size, *scales):
        return _forward(mode, x, list(output_size), False, list(scales) + [None] * (len(output_size) - len(scales)))

    def backward(g, output_size, input_size, *scales):
        scales = list(scales) + [None] * (len(output_size) - len(scales))
        return _backward(mode, g, list(output_size), list(input_size), False, scales)

    return forward, backward


def _interpolating(mode):
    def forward(x, output_size, align_corners, *scales):
        return _forward(
            mode, x, list(output_size), align_corners, list(scales) + [None] * (len(output_size) - len(scales))
        )

    def backward(g, output_size, input_size, align_corners, *scales):
        scales = list(scales) + [None] * (len(output_size) - len(scales))
        return _backward(mode, g, list(output_size), list(input_size), align_corners, scales)

    return forward, backward


def upsample_decompositions() -> dict:
    """The table entries: every upsample op and its backward (.default and
    .vec forward overloads)."""
    table = {}
    ops = [
        ("nearest", 1, aten.upsample_nearest1d, aten.upsample_nearest1d_backward),
        ("nearest", 2, aten.upsample_nearest2d, aten.upsample_nearest2d_backward),
        ("nearest", 3, aten.upsample_nearest3d, aten.upsample_nearest3d_backward),
        ("nearest-exact", 1, aten._upsample_nearest_exact1d, aten._upsample_nearest_exact1d_backward),
        ("nearest-exact", 2, aten._upsample_nearest_exact2d, aten._upsample_nearest_exact2d_backward),
        ("nearest-exact", 3, aten._upsample_nearest_exact3d, aten._upsample_nearest_exact3d_backward),
        ("linear", 1, aten.upsample_linear1d, aten.upsample_linear1d_backward),
        ("linear", 2, aten.upsample_bilinear2d, aten.upsample_bilinear2d_backward),
        ("linear", 3, aten.upsample_trilinear3d, aten.upsample_trilinear3d_backward),
        ("cubic", 2, aten.upsample_bicubic2d, aten.upsample_bicubic2d_backward),
    ]
    for mode, dims, op, backward_op in ops:
        forward, backward = (_nearest if mode.startswith("nearest") else _interpolating)(mode)
        table[op.default] = forward
        table[op.vec] = _vec(mode, dims)
        table[backward_op.default] = backward
    return table
