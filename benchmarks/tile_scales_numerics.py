"""What K and V scales per key tile would cost or buy in accuracy against the contract's per-head scales (exact math).

A kernel that encodes K and V inside its grid, a tile at a time, can take each tile's amax itself; per-head scales
need a pass over the whole head first (docs/performance.md, "What limits it now"). This prints the end-to-end SQNR
(dB) of float64 attention on the dequantized inputs against float64 attention on the originals, with q quantized
per 16 rows (as the drop-in's kernels do, but by amax / 448 where they take a power of two) and K, V per head or per
tile of 128 or 64 keys, each scale amax / 448 and each code exactly torch.float8_e4m3fn.

    python benchmarks/tile_scales_numerics.py
"""

import math

import torch
from kv_cache_numerics import sqnr_db  # this folder

SHAPES = [(1, 8, 1024, 64), (2, 8, 2048, 128)]
KINDS = ["randn", "key channel offsets, sd 5", "1/256 of k, v rows x100", "k, v magnitude 0.2 -> 5 along keys"]
TILES = [None, 128, 64]  # None: per head


def quantize_rows(x: torch.Tensor, rows) -> torch.Tensor:
    """x [B, H, S, D] float64 through E4M3 codes with one scale per `rows` rows of each head (None: the whole head)."""
    b, h, s, d = x.shape
    rows = rows or s
    pad = -s % rows
    tiles = torch.nn.functional.pad(x, (0, 0, 0, pad)).view(b, h, (s + pad) // rows, rows, d)
    amax = tiles.abs().amax(dim=(-2, -1), keepdim=True)
    scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
    codes = (tiles / scale).to(torch.float8_e4m3fn)
    return (codes.to(torch.float64) * scale).view(b, h, s + pad, d)[:, :, :s]


def attend(q, k, v, causal):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


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
    names = ["per head" if t is None else f"per {t} keys" for t in TILES]
    print("| shape | inputs | " + " | ".join(names) + " | causal: " + " | ".join(names) + " |")
    print("|---" * (2 + 2 * len(TILES)) + "|")
    for shape in SHAPES:
        for kind in KINDS:
            q, k, v = make_inputs(kind, shape, gen)
            q16 = quantize_rows(q, 16)
            cells = []
            for causal in (False, True):
                ref = attend(q, k, v, causal)
                cells += [sqnr_db(attend(q16, quantize_rows(k, t), quantize_rows(v, t), causal), ref) for t in TILES]
            print(f"| {'x'.join(map(str, shape))} | {kind} | " + " | ".join(f"{c:.2f}" for c in cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
