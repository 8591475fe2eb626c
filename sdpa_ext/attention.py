"""Drop-in replacement for torch.nn.functional.scaled_dot_product_attention on fp16/bf16 tensors."""

import functools
import math
import warnings
from collections import Counter
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias, CausalVariant

from sdpa_ext import ops
from sdpa_ext.quant import quantize_fp8_kv, quantize_fp8_qkv
from sdpa_ext.variants import WIDE_HEAD_DIMS

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
# Head dims with kernels (variant 'auto' has one for each; 256 in the scalar, mma.sync, decode and wgmma+predecode
# kernels). A smaller head dim runs zero-padded to the next one: zero dims add nothing to q k^T, leave each head's
# amax (so its E4M3 codes) unchanged, and give zero output dims, cut off again; the softmax scale stays that of the
# true head dim.
# Larger head dims run on torch SDPA (fallback_counts()).
KERNEL_HEAD_DIMS = WIDE_HEAD_DIMS

# Keys are not smoothed by default: what it buys and costs, measured on an H100 (2026-11-24, fp16, graph us; SQNR of
# the output against fp32 SDPA):
# - keys with channel offsets of sd 5: 26.4 dB smoothed against 16.7 (1x8x1024x64), 26.6 against 16.9
#   (4x16x2048x128); sd 1: 26.4 against 25.1; no offsets: the same within 0.02 dB;
# - time end to end: +4.0 us at 1x8x512x64 (12.7 against 8.7, cuDNN 9.1) and +4.3 at 2x8x256x64 (the one-launch
#   kernels' statistics and extra barriers: a fixed cost per call), +2.9% at 4x16x2048x128, +3.5% at 4x16x2048x64,
#   +6% at 1x16x8192x128, +11.5% at 32x16x577x64.
# The small shapes would lose their lead over cuDNN, so smoothing is the caller's choice: models whose keys carry
# channel offsets (most trained ones) gain ~10 dB with smooth_keys=True.
SMOOTH_KEYS_DEFAULT = False

_fallbacks: Counter = Counter()  # drop-in calls that ran torch SDPA, by reason
# Bound at import: inside sdpa_ext.patch_torch_sdpa() the name F.scaled_dot_product_attention is the drop-in itself,
# and a fallback through it would call itself.
_torch_sdpa = F.scaled_dot_product_attention


def fallback_counts() -> Dict[str, int]:
    """Drop-in calls that ran F.scaled_dot_product_attention instead of sdpa_ext, by reason (each warned once)."""
    return dict(_fallbacks)


def run_torch_sdpa(reason: str, *args, **kwargs) -> torch.Tensor:
    """torch's own F.scaled_dot_product_attention(*args, **kwargs) for a call sdpa_ext has no kernel for: counted in
    fallback_counts() under `reason`, warned once per reason."""
    if reason not in _fallbacks:
        warnings.warn(f"sdpa_ext.scaled_dot_product_attention: {reason} has no kernel; running torch SDPA",
                      stacklevel=3)
    _fallbacks[reason] += 1
    return _torch_sdpa(*args, **kwargs)


def kernel_head_dim(head_dim: int) -> Optional[int]:
    """The smallest head dim with kernels that holds `head_dim`, or None when none does."""
    return next((width for width in KERNEL_HEAD_DIMS if width >= head_dim), None)


def pad_last_dim(x: torch.Tensor, width: int) -> torch.Tensor:
    """x [..., D] with zeros appended up to `width` dims."""
    if x.size(-1) == width:
        return x
    return F.pad(x, (0, width - x.size(-1)))


def quantize_padded(query, key, value, width, smooth_keys):
    """(q8, q_scale, k8, k_scale, v8, v_scale) of the inputs zero-padded to `width` dims. Zero dims leave each head's
    amax alone and encode to code 0, so the true head dims are quantized and the quantizer writes their codes padded
    (codes_width): at ViT-H/14's 32x16x257x80 (fp16) the drop-in `fast` took 221.0 us against 100.2 for its
    quantizer and kernel while torch padded the codes (F.pad of the bytes, H200), and 0.824x the model's speed on
    torch SDPA where the values were padded before the quantizer (0.773x, H100, benchmarks/vit.py). Smoothed keys
    keep the padded values: the quantizer's channel groups take rows of a power of two of 16-byte vectors
    (smoothable_width)."""
    if smooth_keys:
        query, key, value = (pad_last_dim(t, width) for t in (query, key, value))
        return quantize_fp8_qkv(query, key, value, smooth_k=True)[:6]
    return quantize_fp8_qkv(query, key, value, codes_width=width)


# q's size from which the kernels quantize it themselves (kernel_quantizes_query). The drop-in end to end, q per 16
# rows in the kernel against q per head through the quantizer, fp16, graph us, H100, one run of 3 rounds: 1x8x512x64
# (q of 512 KB, one wave of blocks whose q load is their critical path) 8.8 / 8.4; 4x16x2048x64 (16 MB) 174.3 /
# 180.7, causal 119.8 / 125.3; 4x16x2048x128 `fast` 231.8 / 240.4, causal 164.8 / 173.3, `auto` 281.4 / 282.8;
# 1x16x8192x128 `fast` 697.3 / 713.3, `auto` 877.6 / 866.5 (the one loss; causal 492.5 / 510.2); 32x16x577x64
# 230.2 / 241.5; 32x12x197x64 (9.7 MB) 54.8 / 57.8.
KERNEL_QUANTIZES_QUERY_BYTES = 4 << 20


@functools.lru_cache(maxsize=None)
def _is_hopper(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) == (9, 0)


def kernel_quantizes_query(query, width, variant, smooth_keys) -> bool:
    """Whether fp8_forward quantizes q itself, a scale per 16 rows (q_quantization='per_16_rows'): where `auto` and
    `fast` take kernels that do (the Hopper kernels and the CPU's, at kernel head dims 64 and 128; a q of fewer dims,
    a multiple of 8, read as zero-padded to `width`), keys are not smoothed and q is large enough to gain. q then
    makes no pass of its own through memory: quantize_fp8_kv takes k and v."""
    large = query.numel() * query.element_size() >= KERNEL_QUANTIZES_QUERY_BYTES
    if not (variant in ("auto", "fast") and width <= 128 and query.size(-1) % 8 == 0 and not smooth_keys and large):
        return False
    device = query.device
    return device.type == "cpu" or (device.type == "cuda" and _is_hopper(
        device.index if device.index is not None else torch.cuda.current_device()))


def quantize_inputs(query, key, value, width, variant, smooth_keys):
    """What the drop-in passes fp8_forward: (q, q_scale, k8, k_scale, v8, v_scale, q_quantization). k and v as codes
    zero-padded to `width` dims; q as codes too, or as its values where the kernel quantizes it
    (kernel_quantizes_query), then narrower than k and v where they are padded: the kernel reads it as zero-padded."""
    if kernel_quantizes_query(query, width, variant, smooth_keys):
        padding = None if query.size(-1) == value.size(-1) == width else width
        return (query, None, *quantize_fp8_kv(key, value, codes_width=padding), "per_16_rows")
    return (*quantize_padded(query, key, value, width, smooth_keys), "per_head")


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


def empty_in_query_layout(query: torch.Tensor, dims: int) -> torch.Tensor:
    """An uninitialized [B, H, Sq, dims] tensor of q's dtype whose B, H and Sq dims lie in memory in the order of q's
    strides, the last dim contiguous, as torch's flash and cuDNN backends lay out their output. Models project q as
    [B, S, H, D] and view it as [B, H, S, D] (timm, transformers); their out.transpose(1, 2).reshape(B, S, H * D)
    after attention is then a view, where a contiguous [B, H, S, D] out took a copy kernel of its own."""
    order = sorted(range(3), key=lambda dim: -query.stride(dim))  # outermost first; ties keep B, H, S
    buffer = query.new_empty([query.size(dim) for dim in order] + [dims])
    return buffer.permute(*(order.index(dim) for dim in range(3)), 3)


def empty_input_attention(q, k, v, is_causal, alignment):
    """The drop-in's answer where q, k or v is empty, which the kernels do not take: an empty out where B, H, Sq or
    v's dims are 0; zeros for rows that see no key; where q and k have no dims, every score is 0 and a row is the mean
    of the v rows it sees. Computed here rather than by torch SDPA: torch 2.11's CPU backend stopped the process with
    a floating-point exception on one of these calls (H200 machine, 2026-11-30), where torch 2.13 returned them."""
    rows, keys = q.size(-2), k.size(-2)
    sees = torch.ones(rows, keys, dtype=torch.bool, device=q.device)
    if is_causal:  # query i sees keys j <= i, or j <= i + keys - rows aligned bottom-right
        sees = sees.tril(keys - rows if alignment == "bottom_right" else 0)
    weights = sees.float() / sees.sum(-1, keepdim=True).clamp(min=1)
    v = v.repeat_interleave(q.size(1) // v.size(1), dim=1) if v.size(1) not in (0, q.size(1)) else v
    return torch.matmul(weights, v.float()).to(q.dtype)


def attention_views(q, k, v, enable_gqa):
    """((q, k, v) as [B, H, S, D] tensors, the output's leading dims) for inputs of any rank from 2, their leading
    dims broadcast as F.scaled_dot_product_attention broadcasts them: every dim before the last two, but under
    enable_gqa the head dim (-3), which must then exist. Views where they can be (a k and v of batch 1 shared by every
    sequence of q costs no copy). The leading dims are None where q, k and v are already 4-D with one batch (and head)
    shape, the common call, which makes no view (each is a host-side op in eager mode), and where they do not
    broadcast (left for _check_inputs to name)."""
    tensors = (q, k, v)
    kept = 1 if enable_gqa else 0  # leading dims that stay each tensor's own: the heads under GQA
    if any(t.dim() < 2 + kept for t in tensors):
        return tensors, None
    batches = [t.shape[:t.dim() - 2 - kept] for t in tensors]
    if all(t.dim() == 4 for t in tensors) and batches[0] == batches[1] == batches[2]:
        return tensors, None
    try:
        batch = torch.broadcast_shapes(*batches)
    except RuntimeError:
        return tensors, None
    if kept:
        flat = math.prod(batch)
        views = tuple(t.expand(*batch, *t.shape[-3:]).reshape(flat, *t.shape[-3:]) for t in tensors)
        return views, (*batch, q.size(-3))
    flat, heads = math.prod(batch[:-1]), batch[-1] if batch else 1
    return tuple(t.expand(*batch, *t.shape[-2:]).reshape(flat, heads, *t.shape[-2:]) for t in tensors), batch


def _check_inputs(q, k, v, dropout_p, enable_gqa):
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p must be 0.0 (inference only), got {dropout_p}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} must be torch.float16 or torch.bfloat16, got {t.dtype}")
        if t.dim() < (3 if enable_gqa else 2):
            raise ValueError(f"{name} must have at least {3 if enable_gqa else 2} dims [..., S, D] (heads at dim -3 "
                             f"with enable_gqa), got shape {list(t.shape)}")
    if not q.dim() == k.dim() == v.dim() == 4:  # attention_views made them 4-D wherever they broadcast
        raise ValueError(f"the leading dims of q, k and v must broadcast as in torch, got shapes {list(q.shape)}, "
                         f"{list(k.shape)} and {list(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.size(-1) != q.size(-1):
        raise ValueError(f"k must have the head dim of q ({q.size(-1)}), got shape {list(k.shape)}")
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
    smooth_keys: bool = SMOOTH_KEYS_DEFAULT,
) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v with k and v quantized to E4M3 per head, q per head or, where the
    kernel quantizes it itself (kernel_quantizes_query), per 16 rows.

    Same call as F.scaled_dot_product_attention for [B, H, S, D] fp16/bf16 tensors, and as there for other ranks
    from 2 and for leading dims that broadcast (attention_views); the output has the input dtype. v may have a head
    dim of its own, as in torch. Head dims up to 256 other than 64, 128 and 256 run zero-padded to the next of those
    (exact: see KERNEL_HEAD_DIMS); larger ones run torch SDPA, counted in fallback_counts() and warned once. Empty
    tensors give what torch gives (empty_input_attention).
    is_causal is top-left aligned, as in PyTorch; attn_mask may be torch's causal_upper_left or causal_lower_right
    (bottom-right: the last query row sees every key), which F.scaled_dot_product_attention also takes.
    smooth_keys quantizes each head's keys minus their mean key (quantize_fp8_qkv's smooth_k), which leaves the
    softmax, and so the output, unchanged and spends E4M3's range on what varies between keys.
    """
    (query, key, value), out_leading = attention_views(query, key, value, enable_gqa)
    out = _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, variant, smooth_keys)
    return out if out_leading is None else out.reshape(*out_leading, *out.shape[-2:])


def _attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, variant, smooth_keys):
    """scaled_dot_product_attention of [B, H, S, D] tensors."""
    _check_inputs(query, key, value, dropout_p, enable_gqa)
    if any(t.numel() == 0 for t in (query, key, value)):  # whatever the head dim: never handed to torch SDPA
        return empty_input_attention(query, key, value, *causal_alignment_of(attn_mask, is_causal, query, key))
    head_dim, value_dim = query.size(-1), value.size(-1)
    width = kernel_head_dim(max(head_dim, value_dim))
    if width is None:
        return run_torch_sdpa(f"head dim {max(head_dim, value_dim)} > {KERNEL_HEAD_DIMS[-1]}", query, key, value,
                              attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    is_causal, alignment = causal_alignment_of(attn_mask, is_causal, query, key)
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    q8, q_scale, k8, k_scale, v8, v_scale, q_quantization = quantize_inputs(query, key, value, width, variant,
                                                                            smooth_keys)
    # v's dims zero-padded to the kernel's: the kernels write only the true ones where they are a multiple of 8.
    out_dims = value_dim if value_dim % 8 == 0 else width
    out = empty_in_query_layout(query, out_dims)
    lse = query.new_empty(query.shape[:3], dtype=torch.float32)
    ops.fp8_forward_into(q8, k8, v8, q_scale, k_scale, v_scale, out, lse, is_causal, scale, variant,
                         causal_alignment=alignment, q_quantization=q_quantization)
    if out_dims == value_dim:
        return out
    return empty_in_query_layout(query, value_dim).copy_(out[..., :value_dim])
