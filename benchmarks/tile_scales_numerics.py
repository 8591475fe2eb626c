"""What K and V scales per key tile would cost or buy in accuracy against the contract's per-head scales (exact math).

A kernel that encodes K and V inside its grid, a tile at a time, can take each tile's amax itself; per-head scales
need a pass over the whole head first (docs/performance.md, "What limits it now"). This prints the end-to-end SQNR
(dB) of float64 attention (torch SDPA) on the dequantized inputs against float64 attention on the originals, with
q quantized per 16 rows (as the drop-in's kernels do, but by amax / 448 where they take a power of two) and K, V per
head or per tile of 128 or 64 keys, each tile through sdpa_ext.quantize_fp8 as a head of its own (values in
float32), by amax / 448 or by that rounded up to a power of two (as q's per 16 rows: one multiply a value to
encode, which a quantizer on a few SMs needs: h200-2026-11-29-quantizer-beside-kernel.md).

    python benchmarks/tile_scales_numerics.py
"""

import torch
import torch.nn.functional as F

import sdpa_ext
from kv_cache_numerics import sqnr_db  # this folder

SHAPES = [(1, 8, 1024, 64), (2, 8, 2048, 128)]
KINDS = ["randn", "key channel offsets, sd 5", "1/256 of k, v rows x100", "k, v magnitude 0.2 -> 5 along keys"]
# (rows per scale, power-of-two scales); rows None: per head.
TILES = [(None, False), (128, False), (64, False), (64, True)]


def quantize_rows(x: torch.Tensor, rows, power_of_two=False) -> torch.Tensor:
    """x [B, H, S, D] through sdpa_ext's E4M3 quantizer with one scale per `rows` rows of each head (None: the
    whole head): each tile of rows quantized as a head of its own, by amax / 448 or, with power_of_two, by that
    rounded up to a power of two (1 for a tile of zeros); then dequantized (float64)."""
    b, h, s, d = x.shape
    rows = rows or s
    pad = -s % rows
    tiles = F.pad(x.float(), (0, 0, 0, pad)).reshape(b, h * ((s + pad) // rows), rows, d)
    scale = None
    if power_of_two:
        amax = tiles.abs().amax(dim=(2, 3)).double()
        scale = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / 448))), 1.0).float()
    values = sdpa_ext.dequantize_fp8(*sdpa_ext.quantize_fp8(tiles, scale))
    return values.reshape(b, h, s + pad, d)[:, :, :s].double()


def make_inputs(kind, shape, gen):
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(3))
    b, h, s, d = shape
    if kind == KINDS[1]:
        k = k + 5 * torch.randn(b, h, 1, d, generator=gen, dtype=torch.float64)
    elif kind == KINDS[2]:
        rows = torch.randperm(s, generator=gen)[: max(1, s // 256)]
        k[:, :, rows] *= 100
        v[:, :, rows] *= 100
    elif kind == KINDS[3]:
        ramp = torch.linspace(0.2, 5, s, dtype=torch.float64).view(1, 1, s, 1)
        k, v = k * ramp, v * ramp
    return q, k, v


def main():
    gen = torch.Generator().manual_seed(0)
    names = [("per head" if t is None else f"per {t} keys") + (", 2^k" if p else "") for t, p in TILES]
    print("| shape | inputs | " + " | ".join(names) + " | causal: " + " | ".join(names) + " |")
    print("|---" * (2 + 2 * len(TILES)) + "|")
    for shape in SHAPES:
        for kind in KINDS:
            q, k, v = make_inputs(kind, shape, gen)
            q16 = quantize_rows(q, 16)
            kv_by_tile = [(quantize_rows(k, t, p), quantize_rows(v, t, p)) for t, p in TILES]
            cells = []
            for causal in (False, True):
                ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                cells += [sqnr_db(F.scaled_dot_product_attention(q16, k_tiled, v_tiled, is_causal=causal), ref)
                          for k_tiled, v_tiled in kv_by_tile]
            print(f"| {'x'.join(map(str, shape))} | {kind} | " + " | ".join(f"{c:.2f}" for c in cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
