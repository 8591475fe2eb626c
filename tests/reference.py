"""Independent references and error metrics for the tests (plain PyTorch math, no sdpa_ext code)."""

import math

import torch
import torch.nn.functional as F


def attention_float64(q, k, v, is_causal=False, scale=None):
    """Exact attention in float64 on real-valued [B, H, S, D] inputs; returns (out, lse) in float64."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.size(1) // k.size(1)
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale
    if is_causal:
        seqlen_q, seqlen_k = scores.shape[-2:]
        visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device).tril()  # top-left aligned
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v, lse


def sdpa_float32(q, k, v, is_causal=False, scale=None):
    """PyTorch SDPA in fp32 on the original (unquantized) inputs: the end-to-end reference."""
    group = q.size(1) // k.size(1)
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q.float(), k, v, is_causal=is_causal, scale=scale)


def sqnr_db(x, ref):
    """Signal-to-quantization-noise ratio of x against ref, in dB (inf when they are equal)."""
    x, ref = x.double(), ref.double()
    noise = (x - ref).pow(2).sum().item()
    signal = ref.pow(2).sum().item()
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def abs_errors(x, ref):
    """(max abs, mean abs) difference."""
    diff = (x.double() - ref.double()).abs()
    return diff.max().item(), diff.mean().item()
