"""A KV cache that holds keys and values as E4M3 codes in preallocated buffers, for decoding with fp8_forward.

Scales are fixed per (batch, kv head) by the first write: the amax of the prefill times `scale_margin`, over 448
(or scales the caller passes). Every later row is encoded with those scales by one kernel straight into the buffers
(sdpa::kv_cache_append), saturating at +-448, never NaN. With `smooth_keys` the cache stores k - m, m the prefill's
mean key per (batch, kv head): softmax over the keys is unchanged (q.m adds the same amount to every score of a
row), so only lse moves, by softmax_scale * q.m (`lse_shift`).
"""

import math
from typing import Optional, Tuple

import torch

from sdpa_ext import ops
from sdpa_ext.quant import E4M3_MAX, dequantize_fp8, quantize_fp8

# Headroom above the prefill's amax for rows appended later. E4M3 is a float format: a larger scale keeps every
# normal code's relative precision and only moves the subnormal threshold (2^-6 of the top) up, while rows beyond
# the scale's range saturate. Measured (benchmarks/kv_cache_numerics.py, exact math on the CPU; SQNR of 4096 rows
# appended after a 1024-row randn prefill, margins 1 / 2 / 4): rows drawn like the prefill's 31.6 / 31.6 / 31.6 dB,
# with channels spread over 4 decades 31.4 / 31.5 / 31.5; rows 1.5x wider 29.8 / 31.5 / 31.5, 3x wider
# 13.6 / 29.8 / 31.5. 4 costs nothing measurable and absorbs drift.
DEFAULT_SCALE_MARGIN = 4.0


def _masked(x, valid, fill):
    return x if valid is None else x.masked_fill(~valid, fill)


def _channel_range(x, valid):
    """(min, max) over the real rows of x [B, H, T, D], per channel, as float32 [B, H, D]; +inf and -inf where a
    sequence has no rows. The statistics of the prefill: torch.aminmax reads x once for both. The float32 copies,
    masks and abs they replace took 3.0 ms of GPU time in a 64 ms prefill of Llama-8B-sized layers (8, B=4,
    S=2048, H100; torch profiler)."""
    if valid is None:
        lo, hi = torch.aminmax(x, dim=2)
    else:
        lo, hi = _masked(x, valid, float("inf")).amin(dim=2), _masked(x, valid, float("-inf")).amax(dim=2)
    return lo.float(), hi.float()


class FP8KVCache:
    """K and V of `batch` sequences as E4M3 codes: [batch, heads_kv, capacity, head_dim] each, with float32 scales
    [batch, heads_kv], the key shift [batch, heads_kv, head_dim] (smooth_keys) and the keys in use per sequence,
    `lengths` ([batch] int32, on the device: what fp8_forward's seqlens_k reads)."""

    # smooth_keys by default: end-to-end SQNR of decode from the cache against fp32 SDPA (benchmarks/
    # kv_cache_numerics.py, worst of 3 seeds), smoothed / not, for keys with per-channel offsets of standard
    # deviation 0, 1 and 5: 26.0 / 26.2, 26.1 / 24.9, 26.1 / 16.6 dB. Trained models' keys carry such offsets.
    def __init__(self, batch: int, heads_kv: int, capacity: int, head_dim: int, device=None,
                 smooth_keys: bool = True, scale_margin: float = DEFAULT_SCALE_MARGIN):
        for name, value in (("batch", batch), ("heads_kv", heads_kv), ("capacity", capacity), ("head_dim", head_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not (math.isfinite(scale_margin) and scale_margin >= 1.0):
            raise ValueError(f"scale_margin must be a finite number >= 1, got {scale_margin!r}")
        codes = dict(dtype=torch.float8_e4m3fn, device=device)
        self.k_codes = torch.zeros(batch, heads_kv, capacity, head_dim, **codes)
        self.v_codes = torch.zeros(batch, heads_kv, capacity, head_dim, **codes)
        self.k_scale = torch.ones(batch, heads_kv, dtype=torch.float32, device=device)
        self.v_scale = torch.ones(batch, heads_kv, dtype=torch.float32, device=device)
        shift = torch.zeros(batch, heads_kv, head_dim, dtype=torch.float32, device=device)
        self.k_shift = shift if smooth_keys else None
        self.lengths = torch.zeros(batch, dtype=torch.int32, device=device)
        self.scale_margin = scale_margin
        self.scales_fixed = False
        self.rows_written = 0  # rows per sequence so far (host side), to refuse writes past the capacity

    @property
    def capacity(self) -> int:
        return self.k_codes.size(2)

    def memory_bytes(self) -> int:
        """Bytes the cache holds on its device: codes, scales, shift and lengths."""
        tensors = (self.k_codes, self.v_codes, self.k_scale, self.v_scale, self.k_shift, self.lengths)
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    def _check_rows(self, k, v):
        expected = (self.k_codes.size(0), self.k_codes.size(1), self.k_codes.size(3))
        for name, t in (("k", k), ("v", v)):
            if t.dim() != 4 or (t.size(0), t.size(1), t.size(3)) != expected:
                raise ValueError(f"{name} must have shape [B, Hkv, T, D] with (B, Hkv, D) = {expected}, "
                                 f"got {list(t.shape)}")
        if self.rows_written + k.size(2) > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} rows per sequence: {self.rows_written} written, "
                             f"{k.size(2)} more do not fit")

    def prefill(self, k: torch.Tensor, v: torch.Tensor, lengths: Optional[torch.Tensor] = None,
                k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None) -> None:
        """First write: fixes the scales (and the key shift) from k and v [B, Hkv, T, D] and stores them at rows
        0..T-1. `lengths` ([B] int) marks how many of the T rows of each sequence are real (right padding); the
        statistics skip the others. Scales passed by the caller ([B, Hkv] float32) are used as they are."""
        if self.scales_fixed:
            raise RuntimeError("prefill fixes the scales and runs once; use append for further rows")
        self._check_rows(k, v)
        valid = None if lengths is None else self._valid_rows(k, lengths)
        k_lo, k_hi = _channel_range(k, valid)
        if self.k_shift is not None:
            count = k.size(2) if valid is None else valid.sum(dim=2).clamp(min=1)
            self.k_shift.copy_(_masked(k, valid, 0.0).sum(dim=2, dtype=torch.float32) / count)
            # max |k - m| per channel from the channel's range alone: rounding k - m to fp32 keeps the order of the
            # k, so this is the amax of the shifted keys without writing them (one read of k for all three).
            k_lo, k_hi = k_lo - self.k_shift, k_hi - self.k_shift
        self.k_scale.copy_(self._scale(k_lo, k_hi) if k_scale is None else k_scale)
        self.v_scale.copy_(self._scale(*_channel_range(v, valid)) if v_scale is None else v_scale)
        self.scales_fixed = True
        self.lengths.zero_()
        self._write(k, v)
        self.lengths.copy_(lengths if lengths is not None else torch.full_like(self.lengths, k.size(2)))

    @staticmethod
    def _valid_rows(k, lengths):
        """[B, 1, T, 1] bool: which rows of k are real (row < lengths[b])."""
        rows = torch.arange(k.size(2), device=k.device)
        return (rows[None, :] < lengths.to(k.device)[:, None])[:, None, :, None]

    def _scale(self, lo, hi):
        """Scales [B, H] from the per-channel range [B, H, D] (float32) of a head's values; 1 for a head of zeros
        (or of no rows)."""
        amax = torch.maximum(hi, -lo).amax(dim=2)
        return torch.where(amax > 0, amax * self.scale_margin / E4M3_MAX, torch.ones_like(amax))

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Encodes k and v [B, Hkv, T, D] with the fixed scales at each sequence's current length, then advances
        the lengths by T."""
        if not self.scales_fixed:
            raise RuntimeError("append needs the scales that prefill fixes: call prefill first")
        self._check_rows(k, v)
        self._write(k, v)
        self.lengths += k.size(2)

    def _write(self, k, v):
        ops.kv_cache_append(k, v, self.k_codes, self.v_codes, self.k_scale, self.v_scale, self.lengths, self.k_shift)
        self.rows_written += k.size(2)

    def reset(self) -> None:
        """Forgets every row and the scales, keeping the buffers: the next write is a prefill again."""
        self.scales_fixed = False
        self.rows_written = 0
        self.lengths.zero_()

    def update(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """prefill on the first call, append after."""
        (self.append if self.scales_fixed else self.prefill)(k, v)

    def attend(self, q: torch.Tensor, is_causal: bool = True, scale: Optional[float] = None, variant: str = "auto",
               out_dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Attention of q [B, Hq, Sq, D] (fp16/bf16, quantized per head by the kernel) over each sequence's keys;
        causal masks align bottom-right, so that q's rows are the sequence's last Sq positions. Returns (out, lse);
        lse is that of the stored keys: add lse_shift(q) for the unshifted ones. One launch for up to 16 rows per
        head, with no host synchronization: a CUDA graph of append + attend replays as the lengths grow (the
        capacity check of append runs on the host, at capture only)."""
        dtype = out_dtype or (q.dtype if q.dtype in (torch.float16, torch.bfloat16) else torch.float16)
        return ops.fp8_forward(q, self.k_codes, self.v_codes, None, self.k_scale, self.v_scale, is_causal, scale,
                               dtype, variant, seqlens_k=self.lengths, causal_alignment="bottom_right")

    def lse_shift(self, q: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
        """softmax_scale * q.m per row [B, Hq, Sq] (0 without smooth_keys): what the shift m took off each lse of
        attend(q), with q as the kernel saw it (its per-head E4M3 values)."""
        batch, heads_q, seqlen_q, head_dim = q.shape
        if self.k_shift is None:
            return torch.zeros(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device)
        scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
        shift = self.k_shift.repeat_interleave(heads_q // self.k_shift.size(1), dim=1)
        return scale * torch.einsum("bhsd,bhd->bhs", dequantize_fp8(*quantize_fp8(q)), shift)
