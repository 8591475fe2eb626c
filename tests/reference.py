"""Independent references and error metrics for the tests (plain PyTorch math, no sdpa_ext code)."""

import math

import torch
import torch.nn.functional as F


def visible_keys_mask(batch, seqlen_q, seqlen_k, is_causal, causal_alignment="top_left", seqlens_k=None,
                      device="cpu"):
    """[B, 1, Sq, Sk] bool: key j is visible to query i of batch b when j < len_b (len_b = seqlens_k[b] clamped to
    [0, Sk], else Sk) and, causal, j <= i (top-left) or j <= i + len_b - Sq (bottom-right)."""
    lengths = torch.full((batch,), seqlen_k) if seqlens_k is None else seqlens_k.cpu().long().clamp(0, seqlen_k)
    i = torch.arange(seqlen_q)[None, :, None]
    j = torch.arange(seqlen_k)[None, None, :]
    visible = j < lengths[:, None, None]
    if is_causal:
        offset = lengths[:, None, None] - seqlen_q if causal_alignment == "bottom_right" else 0
        visible = visible & (j <= i + offset)
    return visible[:, None].to(device)


def attention_float64(q, k, v, is_causal=False, scale=None, causal_alignment="top_left", seqlens_k=None):
    """Exact attention in float64 on real-valued [B, H, S, D] inputs; returns (out, lse) in float64. A row that
    sees no key gives 0 and lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.size(1) // k.size(1)
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale
    if is_causal or seqlens_k is not None:
        visible = visible_keys_mask(q.size(0), q.size(2), k.size(2), is_causal, causal_alignment, seqlens_k, q.device)
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows of only -inf: 0, not NaN
    return probs @ v, lse


def sdpa_float32(q, k, v, is_causal=False, scale=None, causal_alignment="top_left", seqlens_k=None):
    """PyTorch SDPA in fp32 on the original (unquantized) inputs: the end-to-end reference (rows that see no key
    give 0)."""
    group = q.size(1) // k.size(1)
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    if causal_alignment == "top_left" and seqlens_k is None:
        return F.scaled_dot_product_attention(q.float(), k, v, is_causal=is_causal, scale=scale)
    visible = visible_keys_mask(q.size(0), q.size(2), k.size(2), is_causal, causal_alignment, seqlens_k, q.device)
    out = F.scaled_dot_product_attention(q.float(), k, v, attn_mask=visible, scale=scale)
    return out.masked_fill(~visible.any(dim=-1, keepdim=True), 0.0)


def quantized_in_row_groups(q, first=0):
    """The values of q [B, H, S, D] quantized to E4M3 with one scale per 16 rows of a head, counted from row `first`
    (fp8_forward's q_quantization='per_16_rows'): each group's amax / 448 rounded up to a power of two (at least
    2^-126; 1 for a group of zeros), codes as torch's float8_e4m3fn cast of x / scale, exact for such a scale; rows
    before `first` zero."""
    b, h, s, d = q.shape
    rows = s - first
    groups = -(-rows // 16)
    x = F.pad(q.float()[:, :, first:], (0, 0, 0, groups * 16 - rows)).reshape(b, h, groups, 16 * d)
    amax = x.abs().amax(-1, keepdim=True)
    mantissa, exponent = torch.frexp(amax)  # amax = mantissa 2^exponent, mantissa in [0.5, 1)
    power = (exponent - 9 + (mantissa > 0.875).int()).clamp(min=-126)  # amax <= 448 2^power = 0.875 2^(9 + power)
    scale = torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), power), 1.0)
    values = ((x / scale).to(torch.float8_e4m3fn).float() * scale).reshape(b, h, groups * 16, d)[:, :, :rows]
    return F.pad(values, (0, 0, first, 0))


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
