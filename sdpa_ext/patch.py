"""patch_torch_sdpa(): F.scaled_dot_product_attention runs sdpa_ext's drop-in inside a `with` block.

Vision and diffusion models (timm, diffusers) call F.scaled_dot_product_attention directly, with no attention
registry to plug into; users swap the function itself, as they do for SageAttention. The swap here keeps the model
correct for calls the drop-in cannot take: those run torch SDPA, counted in sdpa_ext.attention.fallback_counts().
"""

from contextlib import contextmanager
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias

from sdpa_ext import attention


def unsupported_reason(query, key, value, attn_mask, dropout_p) -> Optional[str]:
    """Why the drop-in cannot run this F.scaled_dot_product_attention call, or None when it can."""
    if attn_mask is not None and not isinstance(attn_mask, CausalBias):
        return "an attn_mask tensor"
    if dropout_p != 0.0:
        return "dropout_p > 0"
    if not query.dtype == key.dtype == value.dtype or query.dtype not in attention.SUPPORTED_DTYPES:
        return f"dtype {query.dtype}"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return "inputs that require grad"
    return None


@contextmanager
def patch_torch_sdpa(variant: str = "auto", smooth_keys: bool = attention.SMOOTH_KEYS_DEFAULT) -> Iterator[None]:
    """Within the block, torch.nn.functional.scaled_dot_product_attention is sdpa_ext's drop-in with this variant
    (q, k, v quantized to E4M3 per head on every call). Calls it cannot take (a mask tensor, dropout, float32
    inputs, autograd) run torch SDPA, counted and warned once per reason. The original is restored on exit. Code
    that bound the function to a name of its own before the block (`from torch.nn.functional import ...`) keeps
    torch's; models that call `F.scaled_dot_product_attention`, as timm's do, take the drop-in."""
    original = F.scaled_dot_product_attention

    def drop_in(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        reason = unsupported_reason(query, key, value, attn_mask, dropout_p)
        if reason is not None:
            return attention.run_torch_sdpa(reason, query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        return attention.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                                      scale=scale, enable_gqa=enable_gqa, variant=variant,
                                                      smooth_keys=smooth_keys)

    F.scaled_dot_product_attention = drop_in
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
