"""Thin wrappers over the C++ ops, and their fake (meta) implementations for torch.compile."""

from typing import Optional, Tuple

import torch

from sdpa_ext import _C  # noqa: F401  (loading the library registers torch.ops.sdpa.*)

DEFAULT_OUT_DTYPE = torch.float16


def fp8_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: Optional[torch.Tensor],
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    is_causal: bool = False,
    scale: Optional[float] = None,
    out_dtype: Optional[torch.dtype] = None,
    variant: str = "auto",
    seqlens_k: Optional[torch.Tensor] = None,
    causal_alignment: str = "top_left",
    q_quantization: str = "per_head",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention on E4M3 codes with per-head scales; returns (out [B, Hq, Sq, D], lse [B, Hq, Sq]).

    q may instead hold fp16/bf16/fp32 values, quantized per head as quantize_fp8(q, q_scale) would (q_scale None:
    amax / 448), or with q_quantization='per_16_rows' (fp16/bf16, q_scale None, D <= 128) by the kernel itself with
    a scale per 16 rows of a head (counted from the first row that sees a key): their amax / 448 rounded up to a
    power of two; such a q may have fewer dims than k and v (a multiple of 8), read as zero-padded to their D (k and
    v from quantize_fp8_kv's codes_width; the default scale is then D's). seqlens_k ([B] int32) limits batch b to
    its first seqlens_k[b] keys; causal_alignment 'bottom_right' aligns the causal mask to the last key (query i of
    Sq sees keys j <= i + Sk - Sq)."""
    return torch.ops.sdpa.fp8_forward(q, k, v, q_scale, k_scale, v_scale, is_causal, scale, out_dtype, variant,
                                      seqlens_k, causal_alignment, q_quantization)


def fp8_forward_into(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal=False, scale=None, variant="auto",
                     seqlens_k=None, causal_alignment="top_left", q_quantization="per_head"):
    """fp8_forward writing into preallocated out (fp16/bf16 [B, Hq, Sq, D]) and lse (float32 [B, Hq, Sq]). An out
    with fewer dims than D (a multiple of 8) takes the first out.size(-1) dims of each output row: v's true dims
    where its codes were zero-padded to a kernel head dim."""
    torch.ops.sdpa.fp8_forward_into(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal, scale, variant,
                                    seqlens_k, causal_alignment, q_quantization)


def kv_cache_append(k, v, k_cache, v_cache, k_scale, v_scale, start, k_shift=None):
    """Encodes k and v [B, H, T, D] with the fixed scales [B, H] (keys minus k_shift [B, H, D] if given) into the
    E4M3 caches [B, H, capacity, D] at rows start[b] + t; rows past the capacity are dropped."""
    torch.ops.sdpa.kv_cache_append(k, v, k_cache, v_cache, k_scale, v_scale, start, k_shift)


def _check_same_device(reference_name, reference, **tensors):
    # The C++ checks cover real tensors; a meta tensor mixed with real ones dispatches here instead.
    for name, tensor in tensors.items():
        if tensor.device != reference.device:
            raise RuntimeError(
                f"{name} must be on the same device as {reference_name} ({reference.device}), got {tensor.device}"
            )


def _present(**tensors):
    return {name: t for name, t in tensors.items() if t is not None}


@torch.library.register_fake("sdpa::fp8_forward")
def _fp8_forward_fake(q, k, v, q_scale, k_scale, v_scale, is_causal=False, scale=None, out_dtype=None, variant="auto",
                      seqlens_k=None, causal_alignment="top_left", q_quantization="per_head"):
    _check_same_device("q", q, **_present(k=k, v=v, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
                                          seqlens_k=seqlens_k))
    batch, heads_q, seqlen_q, _ = q.shape
    out = q.new_empty((batch, heads_q, seqlen_q, k.size(3)), dtype=out_dtype or DEFAULT_OUT_DTYPE)
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


@torch.library.register_fake("sdpa::fp8_forward_into")
def _fp8_forward_into_fake(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal=False, scale=None, variant="auto",
                           seqlens_k=None, causal_alignment="top_left", q_quantization="per_head"):
    _check_same_device("q", q, **_present(k=k, v=v, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, out=out,
                                          lse=lse, seqlens_k=seqlens_k))


@torch.library.register_fake("sdpa::kv_cache_append")
def _kv_cache_append_fake(k, v, k_cache, v_cache, k_scale, v_scale, start, k_shift=None):
    _check_same_device("k", k, **_present(v=v, k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale,
                                          start=start, k_shift=k_shift))


@torch.library.register_fake("sdpa::quantize_fp8")
def _quantize_fp8_fake(x, scale=None):
    if scale is not None:
        _check_same_device("x", x, scale=scale)
    codes = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = x.new_empty(x.shape[:2], dtype=torch.float32)
    return codes, scales


def _padded_codes_fake(tensors, codes_width):
    """Codes and scales of each tensor, zero-padded to codes_width dims (quantize_fp8_qkv, quantize_fp8_kv)."""
    head_dim = max(t.size(3) for t in tensors)
    if codes_width is not None and (codes_width < head_dim or codes_width % 8):
        raise RuntimeError(f"codes_width must be a multiple of 8 of at least the head dim ({head_dim}), got "
                           f"{codes_width}")
    outputs = []
    for x in tensors:
        outputs.append(x.new_empty((*x.shape[:3], max(codes_width or 0, x.size(3))), dtype=torch.float8_e4m3fn))
        outputs.append(x.new_empty(x.shape[:2], dtype=torch.float32))
    return tuple(outputs)


@torch.library.register_fake("sdpa::quantize_fp8_qkv")
def _quantize_fp8_qkv_fake(q, k, v, codes_width=None):
    _check_same_device("q", q, k=k, v=v)
    return _padded_codes_fake((q, k, v), codes_width)


@torch.library.register_fake("sdpa::quantize_fp8_kv")
def _quantize_fp8_kv_fake(k, v, codes_width=None):
    _check_same_device("k", k, v=v)
    return _padded_codes_fake((k, v), codes_width)


@torch.library.register_fake("sdpa::quantize_fp8_qkv_smooth_k")
def _quantize_fp8_qkv_smooth_k_fake(q, k, v):
    shift = k.new_empty((k.size(0), k.size(1), k.size(3)), dtype=torch.float32)
    return (*_quantize_fp8_qkv_fake(q, k, v), shift)
