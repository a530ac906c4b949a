"""Scaled dot-product attention on bf16 tensors, computed as eager's CPU
kernel computes it.

Eager PyTorch runs a bf16 ``F.scaled_dot_product_attention`` on the CPU with
its flash-attention kernel: the scores summed in float32 from the bf16 q and k,
the softmax in float32, the probabilities rounded to bf16 for their product
with v, and in the backward the same roundings (the probabilities' and the
scores' gradient rounded to bf16 before their products). Without this module
the lazy device gets the composite ``_scaled_dot_product_attention_math``,
which widens q, k and v to float32 and keeps every product float32: the
compiled step's attention products then ran on the float32 GEMM (a third of
the bf16 one's rate), and the float32 probabilities saved for the backward
took twice the bytes.

Here the same attention is written with the products on widened bf16 values
(``x.float() @ y.float()``, which lazymlir-mark-gemms' bf16-operands gives to
the bf16 GEMM) and its own backward. Anything else (float32, float16,
dropout, a mask that needs a gradient, grouped-query attention) keeps the
composite.
"""

import math

import torch

aten = torch.ops.aten


class _Bf16Attention(torch.autograd.Function):
    """softmax(q k^T * scale + bias) v for bf16 q, k, v (batch dims ..., L or
    S rows, E or Ev features), as eager's flash kernel rounds it; ``bias`` is
    float32 (masked: -inf) or None."""

    @staticmethod
    def forward(ctx, q, k, v, bias, scale):
        scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
        if bias is not None:
            scores = scores + bias
        # A row with every key masked gives zeros, as the composite's
        # _safe_softmax does (eager's kernel: zeros too).
        probs = aten._safe_softmax(scores, -1).to(q.dtype)
        ctx.save_for_backward(q, k, v, probs)
        ctx.scale = scale
        return torch.matmul(probs.float(), v.float()).to(q.dtype)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs = ctx.saved_tensors
        g = grad.float()
        p = probs.float()
        grad_v = torch.matmul(p.transpose(-2, -1), g).to(v.dtype)
        grad_p = torch.matmul(g, v.float().transpose(-2, -1))
        grad_s = (p * (grad_p - (grad_p * p).sum(-1, keepdim=True)) * ctx.scale).to(q.dtype).float()
        grad_q = torch.matmul(grad_s, k.float()).to(q.dtype)
        grad_k = torch.matmul(grad_s.transpose(-2, -1), q.float()).to(k.dtype)
        return grad_q, grad_k, grad_v, None, None


def _bias(attn_mask, is_causal, q, k):
    """The float32 additive mask of ``attn_mask`` (bool: False masked; float:
    added) and ``is_causal``, or None without either."""
    bias = None
    if is_causal:
        rows, cols = q.shape[-2], k.shape[-2]
        keep = torch.ones(rows, cols, dtype=torch.bool, device=q.device).tril()
        bias = torch.zeros(rows, cols, device=q.device).masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            mask = torch.zeros(attn_mask.shape, device=q.device).masked_fill(~attn_mask, float("-inf"))
        else:
            mask = attn_mask.float()
        bias = mask if bias is None else bias + mask
    return bias


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """aten::scaled_dot_product_attention on the lazy device (its
    AutogradPrivateUse1 kernel)."""
    if (
        query.dtype == key.dtype == value.dtype == torch.bfloat16
        and dropout_p == 0.0
        and not enable_gqa
        and query.dim() >= 2
        and query.shape[:-2] == key.shape[:-2] == value.shape[:-2]
        and not (attn_mask is not None and attn_mask.requires_grad)
        and not (attn_mask is not None and is_causal)  # the composite refuses both
    ):
        scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        return _Bf16Attention.apply(query, key, value, _bias(attn_mask, is_causal, query, key), scale)
    # The composite kernel this one replaces (the math decomposition).
    return aten.scaled_dot_product_attention.default.decompose(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )
