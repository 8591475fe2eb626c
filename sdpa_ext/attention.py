"""Drop-in replacement for torch.nn.functional.scaled_dot_product_attention on fp16/bf16 tensors."""

from typing import Optional

import torch

from sdpa_ext import ops
from sdpa_ext.quant import quantize_fp8_qkv

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


def _check_inputs(q, k, v, attn_mask, dropout_p, enable_gqa):
    if attn_mask is not None:
        raise NotImplementedError("attn_mask is not supported: pass is_causal=True for a causal mask")
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p must be 0.0 (inference only), got {dropout_p}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} must be torch.float16 or torch.bfloat16, got {t.dtype}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims [B, H, S, D], got shape {list(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.size(1) != k.size(1) and not enable_gqa:
        raise ValueError(
            f"q has {q.size(1)} heads and k/v have {k.size(1)}: pass enable_gqa=True for grouped-query attention"
        )
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError("sdpa_ext has no backward: call it under torch.no_grad() or torch.inference_mode()")


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    variant: str = "auto",
) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v with q, k, v quantized to E4M3 per head.

    Same call as F.scaled_dot_product_attention for [B, H, S, D] fp16/bf16 tensors; the output has the input
    dtype. The causal mask is top-left aligned, as in PyTorch.
    """
    _check_inputs(query, key, value, attn_mask, dropout_p, enable_gqa)
    q8, q_scale, k8, k_scale, v8, v_scale = quantize_fp8_qkv(query, key, value)
    out, _ = ops.fp8_forward(q8, k8, v8, q_scale, k_scale, v_scale, is_causal, scale, query.dtype, variant)
    return out
