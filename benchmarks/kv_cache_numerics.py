"""Numerics of the FP8 KV cache (sdpa_ext.FP8KVCache), measured on the CPU implementation (exact fp32 math):

1. the scale margin: SQNR of rows appended after a prefill, quantized with the prefill's amax x margin / 448, for
   rows drawn like the prefill's and rows wider than it (saturation);
2. key smoothing: end-to-end SQNR of decode attention from the cache against fp32 SDPA on the original inputs,
   for keys with and without per-channel offsets, with and without smoothing.

    python benchmarks/kv_cache_numerics.py [--out benchmarks/results/kv-cache-numerics.md]
"""

import argparse
import math

import torch
import torch.nn.functional as F

import sdpa_ext

MARGINS = (1.0, 1.25, 1.5, 2.0, 4.0)


def sqnr_db(x, ref):
    noise = (x.double() - ref.double()).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.double().pow(2).sum().item() / noise)


def appended_rows_sqnr(margin, widen, seed=0, prefill=1024, appended=4096, heads=8, head_dim=128, spread=0.0):
    """SQNR of `appended` rows (randn x widen) stored with the scale of a randn prefill; with `spread` the channels
    are scaled by 10^U(-spread, spread), the same for prefill and appended rows (a wide dynamic range per head)."""
    gen = torch.Generator().manual_seed(seed)
    channels = 10.0 ** ((torch.rand(1, heads, 1, head_dim, generator=gen) * 2 - 1) * spread)
    x = torch.randn(1, heads, prefill, head_dim, generator=gen) * channels
    later = torch.randn(1, heads, appended, head_dim, generator=gen) * widen * channels
    cache = sdpa_ext.FP8KVCache(1, heads, prefill + appended, head_dim, smooth_keys=False, scale_margin=margin)
    cache.prefill(x, x)
    cache.append(later, later)
    stored = sdpa_ext.dequantize_fp8(cache.v_codes[:, :, prefill:], cache.v_scale)
    return sqnr_db(stored, later)


def decode_sqnr(offset_sd, smooth, seed=0, keys=1024, heads_q=32, heads_kv=8, head_dim=64, queries=4):
    """End-to-end SQNR of attention from the cache (bf16 inputs) against fp32 SDPA on the original inputs; keys get
    per-channel offsets of standard deviation offset_sd (the same for every token of a head)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads_q, queries, head_dim, generator=gen)
    k = torch.randn(1, heads_kv, keys, head_dim, generator=gen)
    k = k + torch.randn(1, heads_kv, 1, head_dim, generator=gen) * offset_sd
    v = torch.randn(1, heads_kv, keys, head_dim, generator=gen)
    q, k, v = (t.bfloat16() for t in (q, k, v))
    cache = sdpa_ext.FP8KVCache(1, heads_kv, keys, head_dim, smooth_keys=smooth)
    cache.prefill(k[:, :, : keys // 2], v[:, :, : keys // 2])
    cache.append(k[:, :, keys // 2 :], v[:, :, keys // 2 :])
    out, _ = cache.attend(q)
    group = heads_q // heads_kv
    ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(group, 1),
                                         v.float().repeat_interleave(group, 1),
                                         attn_mask=torch.nn.attention.bias.causal_lower_right(queries, keys))
    return sqnr_db(out, ref)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    lines = ["Scale margin: SQNR (dB) of 4096 rows appended after a 1024-row prefill, [1, 8, *, 128], randn",
             "", "| rows appended | " + " | ".join(f"margin {m}" for m in MARGINS) + " |",
             "|---|" + "---|" * len(MARGINS)]
    for widen in (1.0, 1.5, 3.0):
        cells = [f"{appended_rows_sqnr(m, widen):.1f}" for m in MARGINS]
        lines.append(f"| randn x {widen} | " + " | ".join(cells) + " |")
    for spread in (1.0, 2.0):
        cells = [f"{appended_rows_sqnr(m, 1.0, spread=spread):.1f}" for m in MARGINS]
        lines.append(f"| randn, channels x 10^U(-{spread}, {spread}) | " + " | ".join(cells) + " |")
    lines += ["", "Key smoothing: end-to-end SQNR (dB) of decode from the cache against fp32 SDPA, "
              "[1, 32 / 8 heads, 4 queries, 1024 keys, 64], bf16, seeds 0-2 (min)", "",
              "| key channel offsets (sd) | smoothed | not smoothed |", "|---|---|---|"]
    for offset_sd in (0.0, 1.0, 5.0):
        cells = [min(decode_sqnr(offset_sd, smooth, seed) for seed in range(3)) for smooth in (True, False)]
        lines.append(f"| {offset_sd} | {cells[0]:.1f} | {cells[1]:.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# FP8 KV cache numerics (CPU, exact fp32 math)\n\n`python benchmarks/kv_cache_numerics.py`\n\n"
                    f"{text}\n")


if __name__ == "__main__":
    main()
