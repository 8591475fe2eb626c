"""Thin wrappers over the C++ ops, and their fake (meta) implementations for torch.compile."""

from typing import Optional, Tuple

import torch

from sdpa_ext import _C  # noqa: F401  (loading the library registers torch.ops.sdpa.*)

DEFAULT_OUT_DTYPE = torch.float16


def fp8_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    is_causal: bool = False,
    scale: Optional[float] = None,
    out_dtype: Optional[torch.dtype] = None,
    variant: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention on E4M3 codes with per-head scales; returns (out [B, Hq, Sq, D], lse [B, Hq, Sq])."""
    return torch.ops.sdpa.fp8_forward(q, k, v, q_scale, k_scale, v_scale, is_causal, scale, out_dtype, variant)


def fp8_forward_into(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal=False, scale=None, variant="auto"):
    """fp8_forward writing into preallocated out (fp16/bf16 [B, Hq, Sq, D]) and lse (float32 [B, Hq, Sq])."""
    torch.ops.sdpa.fp8_forward_into(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal, scale, variant)


def _check_same_device(reference_name, reference, **tensors):
    # The C++ checks cover real tensors; a meta tensor mixed with real ones dispatches here instead.
    for name, tensor in tensors.items():
        if tensor.device != reference.device:
            raise RuntimeError(
                f"{name} must be on the same device as {reference_name} ({reference.device}), got {tensor.device}"
            )


@torch.library.register_fake("sdpa::fp8_forward")
def _fp8_forward_fake(q, k, v, q_scale, k_scale, v_scale, is_causal=False, scale=None, out_dtype=None, variant="auto"):
    _check_same_device("q", q, k=k, v=v, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)
    batch, heads_q, seqlen_q, head_dim = q.shape
    out = q.new_empty((batch, heads_q, seqlen_q, head_dim), dtype=out_dtype or DEFAULT_OUT_DTYPE)
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse


@torch.library.register_fake("sdpa::fp8_forward_into")
def _fp8_forward_into_fake(q, k, v, q_scale, k_scale, v_scale, out, lse, is_causal=False, scale=None, variant="auto"):
    _check_same_device("q", q, k=k, v=v, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, out=out, lse=lse)


@torch.library.register_fake("sdpa::quantize_fp8")
def _quantize_fp8_fake(x, scale=None):
    if scale is not None:
        _check_same_device("x", x, scale=scale)
    codes = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = x.new_empty(x.shape[:2], dtype=torch.float32)
    return codes, scales


@torch.library.register_fake("sdpa::quantize_fp8_qkv")
def _quantize_fp8_qkv_fake(q, k, v):
    _check_same_device("q", q, k=k, v=v)
    return (*_quantize_fp8_fake(q), *_quantize_fp8_fake(k), *_quantize_fp8_fake(v))
