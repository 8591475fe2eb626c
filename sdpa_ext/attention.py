"""Drop-in replacement for torch.nn.functional.scaled_dot_product_attention on fp16/bf16 tensors."""

from typing import Optional

import torch

from torch.nn.attention.bias import CausalBias, CausalVariant

from sdpa_ext import ops
from sdpa_ext.quant import quantize_fp8_qkv

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


CAUSAL_ALIGNMENTS = {CausalVariant.UPPER_LEFT: "top_left", CausalVariant.LOWER_RIGHT: "bottom_right"}


def causal_alignment_of(attn_mask, is_causal, q, k):
    """(is_causal, causal_alignment) of a call: torch's is_causal is top-left; a CausalBias mask
    (torch.nn.attention.bias.causal_upper_left / causal_lower_right) names its alignment."""
    if attn_mask is None:
        return is_causal, "top_left"
    if not isinstance(attn_mask, CausalBias):
        raise NotImplementedError(
            "attn_mask must be None or a torch.nn.attention.bias.CausalBias (causal_upper_left / causal_lower_right);"
            f" got {type(attn_mask).__name__}: pass is_causal=True for a top-left causal mask"
        )
    if is_causal:
        raise ValueError("is_causal must be False when attn_mask is a CausalBias, as in torch")
    if (attn_mask.seq_len_q, attn_mask.seq_len_kv) != (q.size(-2), k.size(-2)):
        raise ValueError(
            f"attn_mask is a CausalBias for seq_len_q={attn_mask.seq_len_q}, seq_len_kv={attn_mask.seq_len_kv}, "
            f"but q has {q.size(-2)} rows and k {k.size(-2)}"
        )
    return True, CAUSAL_ALIGNMENTS[attn_mask.variant]


def _check_inputs(q, k, v, dropout_p, enable_gqa):
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
    dtype. is_causal is top-left aligned, as in PyTorch; attn_mask may be torch's causal_upper_left or
    causal_lower_right (bottom-right: the last query row sees every key), which F.scaled_dot_product_attention
    also takes.
    """
    _check_inputs(query, key, value, dropout_p, enable_gqa)
    is_causal, alignment = causal_alignment_of(attn_mask, is_causal, query, key)
    q8, q_scale, k8, k_scale, v8, v_scale = quantize_fp8_qkv(query, key, value)
    out, _ = ops.fp8_forward(q8, k8, v8, q_scale, k_scale, v_scale, is_causal, scale, query.dtype, variant,
                             causal_alignment=alignment)
    return out
