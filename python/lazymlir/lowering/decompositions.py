"""The decomposition table the lowering applies (make_fx over the FX graph):
torch-mlir's, plus ours. Ours rewrite ops that torch-mlir would lower to
TMTensor ops the native compiler does not take (scatter-like backward passes),
ops whose torch-mlir lowering gets IEEE special values wrong (NaN, +-inf,
-0.0), and ops it does not lower at all or only through dynamic shapes. The
indexing ones (scatter, index_put, sort, pooling backward) are in
``indexing``."""

import torch

from .indexing import (
    _as_strided_scatter,
    _diagonal_scatter,
    _index_put,
    _kthvalue,
    _max_pool2d_backward,
    _max_unpool2d,
    _max_unpool3d,
    _SCATTERS,
    _scatter_like,
    _sort_bool,
    _sort_stable,
)
from .upsample import upsample_decompositions


_decompositions = None


def decomposition_table():
    global _decompositions
    if _decompositions is None:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        table = dict(get_decomposition_table())
        # Our own decompositions of ops that torch-mlir would lower to its TMTensor
        # dialect (scatter), which the native compiler does not take.
        table[torch.ops.aten.nll_loss_backward.default] = _nll_loss_backward
        table[torch.ops.aten.max_pool2d_with_indices_backward.default] = _max_pool2d_backward
        # IEEE special values as eager computes them (NaN, +-inf, -0.0): ops that
        # torch-mlir lowers with NaN-dropping compares (clamp's ult/ugt, maximum's
        # ogt + select), folds wrongly (x == x to true: isfinite), lowers with a
        # cf.assert (reciprocal of 0 or NaN aborts the process), or with wrong
        # constants (gelu's tanh form).
        aten = torch.ops.aten
        table.update(
            {
                aten.clamp.default: _clamp,
                aten.clamp.Tensor: _clamp,
                aten.clamp_min.default: _clamp_min,
                aten.clamp_min.Tensor: _clamp_min,
                aten.clamp_max.default: _clamp_max,
                aten.clamp_max.Tensor: _clamp_max,
                aten.hardtanh.default: _hardtanh,
                aten.relu6.default: _relu6,
                aten.relu.default: _relu,
                aten.maximum.default: _maximum,
                aten.minimum.default: _minimum,
                aten.fmax.default: _fmax,
                aten.fmin.default: _fmin,
                aten.eq.Tensor: _eq,
                aten.reciprocal.default: _reciprocal,
                aten.fmod.Tensor: _fmod,
                aten.fmod.Scalar: _fmod,
                aten.argmax.default: _argmax,
                aten.argmin.default: _argmin,
                aten.max.dim: _max_dim,
                aten.min.dim: _min_dim,
                aten.trunc.default: _trunc,
                aten.elu.default: _elu,
                aten.pow.Tensor_Scalar: _pow_tensor_scalar,
                aten.gelu.default: _gelu,
            }
        )
        # A comparison of a tensor with a Python scalar of another kind (a float
        # tensor with an int, an int tensor with a float, a bool tensor with an
        # int), or of booleans: torch-mlir's folders read a constant tensor's
        # splat as the scalar's kind, a wrong answer (ones(4) == 1 folds to
        # false; a true splat is -1) or a crash of the process (full(0.) == 0,
        # an int splat with a float).
        for name in ("eq", "ne", "lt", "le", "gt", "ge"):
            table[getattr(aten, name).Scalar] = _compare_scalar(getattr(aten, name).Scalar)
        # Ops torch-mlir does not lower at all (sort.stable, as_strided_scatter,
        # diagonal_scatter) or lowers through dynamic shapes (index_put with a
        # bool mask: nonzero), rewritten into ops it lowers statically.
        table[torch.ops.aten.sort.stable] = _sort_stable
        table[torch.ops.aten.as_strided_scatter.default] = _as_strided_scatter
        table[torch.ops.aten.diagonal_scatter.default] = _diagonal_scatter
        table[torch.ops.aten.index_put.default] = _index_put
        table[torch.ops.aten.kthvalue.default] = _kthvalue  # else tm_tensor.topk
        # max_unpool's indices count within each (n, c) plane; torch._decomp
        # adds the plane's offset, so a -1 or one past the plane landed in a
        # neighbouring plane (a value where eager raises).
        table[torch.ops.aten.max_unpool2d.default] = _max_unpool2d
        table[torch.ops.aten.max_unpool3d.default] = _max_unpool3d
        # PyTorch's reference decompositions end with prims.copy_strided to give
        # a result eager's strides (lerp on a channels_last gradient: AdamW's
        # update of a convolution's weight), which torch-mlir does not lower
        # (the whole step ran eagerly). The lowered graph has value semantics:
        # its layout is the boundary's business (ir.Graph's permutations).
        table[torch.ops.prims.copy_strided.default] = _copy_strided
        # torch-mlir's weight gradient of a grouped convolution is a
        # convolution of the transposed input whose channels (the batch) need
        # not divide into the groups: invalid IR, and a depthwise convolution's
        # whole training step ran eagerly. A transposed convolution's
        # gradients do not lower at all (and marked every convolution_backward
        # of the process eager, the mark being per op and dtypes).
        table[torch.ops.aten.convolution_backward.default] = _convolution_backward
        table[torch.ops.aten.convolution.default] = _grouped_transposed_convolution
        # A negative pad crops (the backward of a pad: Hugging Face's
        # TF-style padding in MobileNetV2); torch-mlir makes it a tensor.pad
        # with negative amounts, which bufferizes to out-of-bounds subviews.
        table[torch.ops.aten.constant_pad_nd.default] = _constant_pad_nd
        # torch-mlir's scatter lowering runs out of memory (an abort) on a
        # negative dim, and its TMTensor lowerings treat bool as signed i1
        # (sort puts True first, add is xor): dims are made non-negative and
        # bool operands go through int32.
        for op in _SCATTERS:
            table[op] = _scatter_like(op, table.get(op))
        # torch-mlir computes layer norm's variance in float64 (twice the work
        # in half-width vectors: 1.4x eager's time at 4096x1024); eager's CPU
        # kernel accumulates in float32 too.
        table[torch.ops.aten.native_layer_norm.default] = _layer_norm_f32(
            table.get(torch.ops.aten.native_layer_norm.default)
        )
        # Upsampling (F.interpolate) and its backward: torch-mlir lowers
        # nearest 2d only, torch._decomp has no backward (upsample.py).
        table.update(upsample_decompositions())
        assert torch.ops.aten.sort.default not in table
        table[torch.ops.aten.sort.default] = _sort_bool
        _decompositions = table
    return _decompositions


def _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """torch._decomp's nll_loss_backward with its scatter of -1 into zeros
    replaced by a one-hot comparison with arange: the same values, in ops that
    lower to plain linalg."""
    channel_dim = 0 if self.dim() < 2 else 1
    if reduction == 1:  # mean
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:
        target = target[0]
    target = target.unsqueeze(channel_dim)
    classes = torch.arange(self.shape[channel_dim], device=target.device)
    if self.dim() >= 2:
        classes = classes.reshape([1, -1] + [1] * (self.dim() - 2))
    grad_input = -(classes == target).to(self.dtype)
    if grad_input.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel_dim)
    if weight is not None:
        shape = [1] * self.dim()
        shape[channel_dim] = weight.shape[0]
        grad_output = grad_output * weight.reshape(shape)
    grad_output = torch.where(target != ignore_index, grad_output, 0)
    return grad_input * grad_output


def _floats(*operands):
    """The result dtype of an elementwise op on ``operands`` (tensors, numbers,
    None: left out) by torch's type promotion, if it is a real floating type;
    else None (the decomposition then declines and the op keeps its usual
    lowering: integers have no NaN)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    present = [t for t in operands if t is not None]
    _, dtype = elementwise_dtypes(*present, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return dtype if dtype.is_floating_point else None


def _clamp(self, min=None, max=None):
    """eager's clamp: a NaN input stays NaN, a NaN tensor bound gives NaN, a tie
    (-0.0 against a 0 bound) keeps the input for a number bound and gives the
    bound for a tensor bound, min > max gives max.  torch-mlir compares with
    ult/ugt, which select the bound for a NaN input."""
    dtype = _floats(self, min, max)
    if dtype is None:
        return NotImplemented
    t = self.to(dtype)
    for bound, beyond in ((min, torch.lt), (max, torch.gt)):
        if bound is None:
            continue
        if isinstance(bound, torch.Tensor):
            # eager's vectorized loop: a tie gives the bound.
            bound = bound.to(dtype)
            at_or_beyond = torch.le if beyond is torch.lt else torch.ge
            t = torch.where(at_or_beyond(t, bound) | torch.isnan(bound), bound, t)
        else:
            t = torch.where(beyond(t, bound), torch.scalar_tensor(bound, dtype=dtype, device=t.device), t)
    return t


def _bools(*operands) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in operands)


def _clamp_min(self, min):
    if _bools(self, min):  # torch-mlir compares i1 as signed: True (-1) < False
        return torch.logical_or(self, min)
    return _clamp(self, min, None)


def _clamp_max(self, max):
    if _bools(self, max):
        return torch.logical_and(self, max)
    return _clamp(self, None, max)


def _hardtanh(self, min_val=-1, max_val=1):
    if not self.is_floating_point():
        # eager keeps an integer input's dtype (its default bounds are floats,
        # which clamp would promote to)
        return torch.clamp(self, min_val, max_val).to(self.dtype)
    return _clamp(self, min_val, max_val)


def _relu6(self, inplace=False):
    return _clamp(self, 0, 6)


def _relu(self):
    """Eager keeps -0.0 (and NaN); torch-mlir's select(x ugt 0, x, 0) gives
    +0.0.  Fused, the compare and select are one kernel."""
    if not self.is_floating_point():
        return NotImplemented
    return _clamp(self, 0, None)


def _maximum(self, other, pick=torch.gt):
    """NaN if either is NaN; a tie (-0.0, +0.0) gives ``other``, as eager's
    vectorized loop does."""
    dtype = _floats(self, other)
    if dtype is None:
        return NotImplemented
    a, b = self.to(dtype), other.to(dtype)
    return torch.where(pick(a, b) | torch.isnan(a), a, b)


def _minimum(self, other):
    return _maximum(self, other, torch.lt)


def _fmax(self, other, pick=torch.lt):
    """The number if one is NaN; a tie gives ``self`` (eager)."""
    dtype = _floats(self, other)
    if dtype is None:
        return NotImplemented
    a, b = self.to(dtype), other.to(dtype)
    return torch.where(pick(a, b) | torch.isnan(a), b, a)


def _fmin(self, other):
    return _fmax(self, other, torch.gt)


def _eq(self, other):
    # torch-mlir folds x == x to true, which is false for NaN (and isfinite,
    # a composite of x == x and |x| != inf, then says NaN is finite).
    if self is other and self.is_floating_point():
        return torch.logical_not(torch.isnan(self))
    return NotImplemented


def _copy_strided(a, stride):
    return torch.ops.aten.clone.default(a)


def _constant_pad_nd(x, pad, value=0):
    """Negative amounts as slices, then the non-negative ones as the pad."""
    if all(p >= 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        dim, low, high = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        start, stop = max(-low, 0), x.shape[dim] - max(-high, 0)
        x = x.narrow(dim, start, max(stop - start, 0))
    return torch.ops.aten.constant_pad_nd.default(x, [max(p, 0) for p in pad], value)


def _convolution_backward(
    grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """A transposed convolution's gradients (_transposed_convolution_backward),
    or a grouped one's, the weight's as one grouped convolution: the input as [C/G, G*N, ...] against the output's
    gradient as [G*O/G, N, ...] with G groups pairs each group's input and
    gradient channels, stride and dilation swapped, cropped to the kernel's
    size."""
    aten = torch.ops.aten
    if transposed:
        return _transposed_convolution_backward(
            grad, x, weight, stride, padding, dilation, output_padding, groups, output_mask
        )
    if groups == 1 or not output_mask[1]:
        return NotImplemented
    n, channels = x.shape[0], x.shape[1]
    spatial = x.dim() - 2
    cg, og = channels // groups, weight.shape[0] // groups
    rest = list(range(3, 3 + spatial))
    xs = x.reshape(n, groups, cg, *x.shape[2:]).permute(2, 1, 0, *rest).reshape(cg, groups * n, *x.shape[2:])
    gs = grad.reshape(n, groups, og, *grad.shape[2:]).permute(1, 2, 0, *rest).reshape(groups * og, n, *grad.shape[2:])
    out = aten.convolution.default(xs, gs, None, dilation, padding, stride, False, [0] * spatial, groups)
    grad_weight = out.transpose(0, 1)
    for d in range(spatial):
        grad_weight = grad_weight.narrow(2 + d, 0, weight.shape[2 + d])
    grad_input = None
    if output_mask[0]:
        grad_input = _transposed_as_convolution(grad, weight, stride, padding, dilation, groups, x.shape[2:])
    grad_bias = grad.sum([0] + list(range(2, grad.dim()))) if output_mask[2] else None
    return grad_input, grad_weight.contiguous(), grad_bias


def _transposed_convolution_backward(grad, x, weight, stride, padding, dilation, output_padding, groups, output_mask):
    """A transposed convolution's gradients (torch-mlir lowers none of them)
    as those of the plain convolution it is the adjoint of: the input's is
    that convolution of the output's gradient with the same weight; the
    weight's is that convolution's weight gradient, with the output's
    gradient as its input and the input as its output's gradient."""
    aten = torch.ops.aten
    spatial = x.dim() - 2
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = aten.convolution.default(
            grad, weight, None, stride, padding, dilation, False, [0] * spatial, groups
        )
    if output_mask[1]:
        grad_weight = aten.convolution_backward.default(
            x, grad, weight, None, stride, padding, dilation, False, [0] * spatial, groups, [False, True, False]
        )[1]
    if output_mask[2]:
        grad_bias = grad.sum([0] + list(range(2, grad.dim())))
    return grad_input, grad_weight, grad_bias


def _transposed_as_convolution(g, weight, stride, padding, dilation, groups, sizes):
    """A grouped transposed convolution of ``g`` to spatial ``sizes`` as a
    plain grouped convolution (torch-mlir's lowering of the transposed one
    makes invalid IR): ``g`` spread out by the stride (zeros between),
    padded to reach ``sizes``, against the kernel flipped with each group's
    in and out channels swapped. Also a grouped convolution's input
    gradient (the transposed convolution of the output's gradient)."""
    aten = torch.ops.aten
    spatial = g.dim() - 2
    og, cg = weight.shape[0] // groups, weight.shape[1]
    for d in range(spatial):
        dim, s = 2 + d, stride[d]
        if s > 1:  # zeros between the elements: [.., L] -> [.., (L - 1) * s + 1]
            length = g.shape[dim]
            g = g.unsqueeze(dim + 1)
            pads = [0, 0] * (g.dim() - dim - 2) + [0, s - 1]
            g = aten.constant_pad_nd.default(g, pads, 0.0)
            g = g.flatten(dim, dim + 1).narrow(dim, 0, (length - 1) * s + 1)
        reach = dilation[d] * (weight.shape[2 + d] - 1)
        left, right = reach - padding[d], sizes[d] + padding[d] - g.shape[dim]
        if left < 0:
            g = g.narrow(dim, -left, g.shape[dim] + left)
            left = 0
        if right < 0:
            g = g.narrow(dim, 0, g.shape[dim] + right)
            right = 0
        if left or right:
            g = aten.constant_pad_nd.default(g, [0, 0] * (spatial - 1 - d) + [left, right], 0.0)
    flipped = weight.reshape(groups, og, cg, *weight.shape[2:]).transpose(1, 2)
    flipped = flipped.reshape(groups * cg, og, *weight.shape[2:]).flip(list(range(2, 2 + spatial)))
    return aten.convolution.default(
        g, flipped, None, [1] * spatial, [0] * spatial, dilation, False, [0] * spatial, groups
    )


def _grouped_transposed_convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """A grouped transposed convolution (nn.ConvTranspose2d(groups=...)):
    torch-mlir's lowering of it makes invalid IR, and the op, found not to
    lower, then ran every convolution of the process eagerly."""
    if not transposed or groups == 1:
        return NotImplemented
    spatial = x.dim() - 2
    sizes = [
        (x.shape[2 + d] - 1) * stride[d]
        - 2 * padding[d]
        + dilation[d] * (weight.shape[2 + d] - 1)
        + output_padding[d]
        + 1
        for d in range(spatial)
    ]
    out = _transposed_as_convolution(x, weight, stride, padding, dilation, groups, sizes)
    if bias is not None:
        out = out + bias.reshape(1, -1, *([1] * spatial))
    return out


_SCALAR_KINDS = {bool: 0, int: 1, float: 2}


def _compare_scalar(op):
    def compare(self, other):
        kind = _SCALAR_KINDS.get(type(other))
        if kind is None or self.is_complex():
            return NotImplemented
        own = 0 if self.dtype == torch.bool else 2 if self.is_floating_point() else 1
        if own == kind and own != 0:
            return NotImplemented
        # Eager's promotion: the tensor and the scalar in their result type;
        # booleans as integers (torch-mlir reads a true splat as -1).
        dtype = torch.result_type(self, other)
        if dtype == torch.bool:
            dtype = torch.int32
        value = bool(other) if dtype == torch.bool else float(other) if dtype.is_floating_point else int(other)
        return op(self.to(dtype), value)

    return compare


def _fmod(self, other):
    """C's fmod, exactly: torch's decomposition a - trunc(a / b) * b rounds, and
    gives NaN for a finite a over +-inf (eager: a) and +0.0 for -0.0.
    remainder(|a|, |b|) is torch-mlir's remf with no sign fix-up to apply."""
    dtype = _floats(self, other)
    if dtype is None:
        return NotImplemented
    a = self.to(dtype)
    b = other.to(dtype) if isinstance(other, torch.Tensor) else torch.scalar_tensor(other, dtype=dtype, device=a.device)
    m = torch.remainder(torch.abs(a), torch.abs(b))
    r = torch.where(a < 0, -m, m)
    # A zero a gives itself (-0.0 included) unless b is 0 or NaN.
    return torch.where((a == 0) & (torch.abs(b) > 0), a, r)


def _reciprocal(self):
    # torch-mlir's reciprocal asserts that no element is 0 (a cf.assert that
    # aborts the process, for NaN too): 1 / x gives eager's inf and NaN.
    if self.is_complex():
        return NotImplemented
    x = self if self.is_floating_point() else self.to(torch.get_default_dtype())
    return torch.ones((), dtype=x.dtype, device=x.device) / x


def _arg_extreme(self, dim, keepdim, extreme):
    """The first index of the row's max (min), or of its first NaN as eager
    gives: torch-mlir selects the index with ogt/olt, which a NaN never wins."""
    if not self.is_floating_point() or self.dim() == 0:
        return NotImplemented
    x = self
    if dim is None:
        x, dim = self.reshape(-1), 0
    dim = dim % x.dim()
    n = x.shape[dim]
    hit = (x == extreme(x, dim, keepdim=True)) | torch.isnan(x)
    index = torch.arange(n, device=x.device).reshape([n] + [1] * (x.dim() - dim - 1))
    first = torch.amin(torch.where(hit, index, n), dim, keepdim=keepdim)
    if keepdim and x is not self:
        first = first.reshape([1] * self.dim())
    return first


def _argmax(self, dim=None, keepdim=False):
    return _arg_extreme(self, dim, keepdim, torch.amax)


def _argmin(self, dim=None, keepdim=False):
    return _arg_extreme(self, dim, keepdim, torch.amin)


def _max_dim(self, dim, keepdim=False):
    indices = _arg_extreme(self, dim, keepdim, torch.amax)
    if indices is NotImplemented:
        return NotImplemented
    return torch.amax(self, dim, keepdim=keepdim), indices


def _min_dim(self, dim, keepdim=False):
    indices = _arg_extreme(self, dim, keepdim, torch.amin)
    if indices is NotImplemented:
        return NotImplemented
    return torch.amin(self, dim, keepdim=keepdim), indices


def _trunc(self):
    # torch's reference, sign(x) * floor(|x|), gives +0.0 for -0.0 (and fmod,
    # frac built on it follow); ceil/floor keep the sign of zero.
    if not self.is_floating_point():
        return NotImplemented
    return torch.where(self < 0, torch.ceil(self), torch.floor(self))


def _elu(self, alpha=1, scale=1, input_scale=1):
    # eager: expm1 (exact for -0.0 and tiny inputs), x <= 0 takes that branch.
    if not self.is_floating_point():
        return NotImplemented
    negative = torch.expm1(self * input_scale) * (alpha * scale)
    return torch.where(self > 0, self * scale, negative)


def _pow_tensor_scalar(self, exponent):
    # eager computes x ** 0.5 as sqrt(x) and x ** -0.5 as rsqrt(x): NaN for -inf,
    # -0.0 for -0.0 (C's pow gives +inf and +0.0).
    if not self.is_floating_point() or isinstance(exponent, bool) or isinstance(exponent, complex):
        return NotImplemented
    if exponent in (0.5, -0.5):
        return torch.sqrt(self) if exponent == 0.5 else torch.rsqrt(self)
    if exponent == int(exponent) and 2 <= abs(exponent) <= 64:
        # Products (eager's own for 2 and 3: x*x, x*x*x): torch-mlir's
        # math.fpowi has an i64 exponent, which LLVM's powi does not take in
        # a vectorized contraction epilogue (GPT-2's gelu_new failed to compile).
        n, power, result = abs(int(exponent)), self, None
        while n:
            if n & 1:
                result = power if result is None else result * power
            n >>= 1
            if n:
                power = power * power
        return torch.reciprocal(result) if exponent < 0 else result
    return NotImplemented


def _gelu(self, approximate="none"):
    # torch-mlir's tanh form uses 0.797724 for sqrt(2 / pi) = 0.7978845608...
    if approximate != "tanh" or not self.is_floating_point():
        return NotImplemented
    inner = 0.7978845608028654 * (self + 0.044715 * self * self * self)
    return 0.5 * self * (1 + torch.tanh(inner))


def _layer_norm_f32(decomposed):
    """native_layer_norm of float32 in float32, two passes over each row (the
    mean, then the squared deviations from it: no cancellation); other dtypes
    keep ``decomposed`` (or torch-mlir's lowering)."""

    def decomposition(input, normalized_shape, weight, bias, eps):
        if input.dtype != torch.float32 or any(t is not None and t.dtype != torch.float32 for t in (weight, bias)):
            return NotImplemented if decomposed is None else decomposed(input, normalized_shape, weight, bias, eps)
        dims = list(range(input.dim() - len(normalized_shape), input.dim()))
        n = 1
        for size in normalized_shape:
            n *= size
        mean = torch.sum(input, dims, keepdim=True) / n
        centered = input - mean
        var = torch.sum(centered * centered, dims, keepdim=True) / n
        rstd = torch.rsqrt(var + eps)
        out = centered * rstd
        if weight is not None:
            out = out * weight
        if bias is not None:
            out = out + bias
        return out, mean, rstd

    return decomposition
