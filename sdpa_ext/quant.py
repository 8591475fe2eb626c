"""Per-head E4M3 quantization: scale[b, h] = amax(|x[b, h]|) / 448 (1 for a head of zeros)."""

from typing import Optional, Tuple

import torch

from sdpa_ext import ops  # noqa: F401  (registers the ops and their fakes)

E4M3_MAX = 448.0


def quantize_fp8(x: torch.Tensor, scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize x [B, H, S, D] (fp16, bf16 or fp32) to E4M3 with one float32 scale per (b, h).

    Returns (x_fp8, scale): x_fp8 is a contiguous torch.float8_e4m3fn tensor whose codes are bit-identical to
    (x / scale[..., None, None]).to(torch.float8_e4m3fn); values beyond +-448 saturate. Pass `scale` ([B, H],
    float32) to use fixed scales instead of the per-head amax.
    """
    return torch.ops.sdpa.quantize_fp8(x, scale)


def quantize_fp8_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, smooth_k: bool = False,
                     codes_width: Optional[int] = None):
    """quantize_fp8 of q, k and v (one dtype) in one call: on CUDA a single launch while every head fits on chip.
    Returns (q_fp8, q_scale, k_fp8, k_scale, v_fp8, v_scale), bit-identical to three quantize_fp8.

    codes_width (a multiple of 8, at least the head dim) gives codes [B, H, S, codes_width] with code 0 past each
    head dim: the zero-padded codes that head dims without kernels (80, 88, ...) run on, written by the quantizer
    itself where a thread block holds a head (no pass over the codes to pad them). Not with smooth_k.

    With smooth_k, k is quantized minus its mean key m (per head and channel, float32 [B, H, D], returned seventh):
    k_fp8 = quantize_fp8(k - m) in float32 arithmetic. Softmax over the keys is unchanged (q.m adds the same to
    every score of a row), only lse moves, by softmax_scale * q.m; keys whose channels carry offsets (as trained
    models' do) then use E4M3's range for what varies. On CUDA m comes out of the pass that takes the amax."""
    if smooth_k:
        if codes_width is not None:
            raise ValueError("codes_width is not supported with smooth_k: pad the values instead")
        return torch.ops.sdpa.quantize_fp8_qkv_smooth_k(q, k, v)
    return torch.ops.sdpa.quantize_fp8_qkv(q, k, v, codes_width)


def quantize_fp8_kv(k: torch.Tensor, v: torch.Tensor, codes_width: Optional[int] = None):
    """quantize_fp8 of k and v (one dtype) in one call, for a q that fp8_forward quantizes itself
    (q_quantization='per_16_rows'). Returns (k_fp8, k_scale, v_fp8, v_scale), bit-identical to two quantize_fp8.
    codes_width zero-pads the codes as in quantize_fp8_qkv; q then stays narrower (fp8_forward reads it as
    zero-padded)."""
    return torch.ops.sdpa.quantize_fp8_kv(k, v, codes_width)


def dequantize_fp8(x_fp8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values that E4M3 codes [B, H, S, D] (float8_e4m3fn or uint8) stand for: code * scale[b, h]."""
    if x_fp8.dtype == torch.uint8:
        x_fp8 = x_fp8.view(torch.float8_e4m3fn)
    if x_fp8.dtype != torch.float8_e4m3fn:
        raise ValueError(f"x_fp8 must be torch.float8_e4m3fn or torch.uint8, got {x_fp8.dtype}")
    if x_fp8.dim() != 4 or tuple(scale.shape) != tuple(x_fp8.shape[:2]):
        raise ValueError(f"scale must have shape [B, H] = {list(x_fp8.shape[:2])}, got {list(scale.shape)}")
    return (x_fp8.to(torch.float32) * scale.to(torch.float32)[:, :, None, None]).to(dtype)
