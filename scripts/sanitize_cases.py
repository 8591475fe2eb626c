#!/usr/bin/env python3
"""Small calls of every CUDA variant (or of the variants named on the command line) and of quantization (or of it
alone: `quantize`), for compute-sanitizer (scripts/sanitize.sh)."""

import sys

import torch

import sdpa_ext

# (B, Hq, Hkv, Sq, Sk, D, causal): partial tiles, GQA, both head dims, Sq != Sk in both directions, and enough
# keys that the Hopper kernels' 3-slot ring wraps around (5 tiles of 128 keys at D = 64, 10 of 64 at D = 128), and
# a grid of 256 blocks whose kv heads from the 33rd on `wgmma+predecode` decodes inside the grid (three chunks of
# keys per block through two buffers) on a GPU of up to 132 SMs, also causal (groups of 33 kv heads, the second
# decoded in the grid); causal 600 x 600 at D = 64 has `wgmma_m192` groups that leave out the last of their block's
# tiles, or all five (rows past seqlen_q). D = 256 (the variants built for it): partial 32-key tiles (64 in
# `wgmma+predecode`), GQA, causal, and 256 blocks of which `wgmma+predecode` decodes the later kv heads in the grid.
# 1x32x1 600 x 700: 160 query blocks per kv head, where `wgmma_fp8+fp8_pv` reads V^T from a pass
# (transpose_values.h); 1x32x1 960 x 961, where `wgmma_fp8_m192+fp8_pv` does and splits its last wave. The 256
# blocks at D = 128 as well (8x32x8 128 x 700): `wgmma+predecode`'s decode in the grid in its D = 128 build, `auto`'s
# kernel for long heads there (three chunks of 128 keys of K or V per block).
CASES = [(1, 2, 2, 17, 33, 64, True), (2, 4, 2, 64, 64, 64, False), (1, 2, 1, 40, 129, 128, True),
         (1, 2, 2, 129, 1, 128, False), (1, 2, 2, 130, 600, 64, False), (1, 2, 1, 200, 600, 128, True),
         (8, 32, 8, 64, 700, 64, False), (8, 32, 8, 64, 700, 64, True), (8, 32, 8, 128, 700, 128, False),
         (8, 32, 8, 128, 700, 128, True), (1, 2, 2, 600, 600, 64, True),
         (1, 4, 2, 70, 150, 256, True), (1, 2, 2, 33, 100, 256, False), (8, 32, 8, 64, 300, 256, True),
         (1, 32, 1, 600, 700, 128, True), (1, 32, 1, 960, 961, 128, False)]


# Decode calls (B, Hq, Hkv, Sq, Sk, D): one, two and four warps along the packed rows (on sm_90, up to 64 packed rows
# of a cache that fits L2 take 16-row tiles: 48 rows, a head across two of them; 128 rows, two warpgroup blocks),
# key splits merged by the combine kernel (B = 1 at 5000 keys), per-sequence lengths with an empty sequence and rows
# that see no key, q given as bf16 values (quantized inside the kernel), bottom-right causal; and an append into an
# FP8 cache. The cache gets fixed scales and no smoothing, so that no torch reduction runs: racecheck reports 2
# hazards in torch's own at::native::reduce_kernel (the amax of a prefill; torch 2.11, H100), none in sdpa_ext's
# kernels. At D = 256: one and two warps, and key splits. More one-warp row tiles than an H100's or H200's SMs (320 at
# D = 64, 160 at D = 128): sm_90's persistent grid, where a block takes several row tiles in turn and reuses its
# shared memory for each.
DECODE_CASES = [(3, 8, 2, 1, 300, 128), (2, 16, 2, 2, 200, 64), (2, 8, 2, 12, 500, 128), (2, 8, 1, 16, 500, 128),
                (1, 32, 8, 1, 5000, 128), (2, 8, 4, 3, 700, 256), (1, 16, 8, 1, 3000, 256), (40, 8, 8, 1, 300, 64),
                (20, 16, 8, 1, 700, 128)]


def run_decode_cases():
    gen = torch.Generator().manual_seed(1)
    for b, hq, hkv, sq, sk, d in DECODE_CASES:
        q = torch.randn(b, hq, sq, d, generator=gen).bfloat16().cuda()
        k, v = (torch.randn(b, hkv, sk, d, generator=gen).bfloat16().cuda() for _ in range(2))
        cache = sdpa_ext.FP8KVCache(b, hkv, sk + 4, d, device="cuda", smooth_keys=False)
        scale = torch.full((b, hkv), 0.02, device="cuda")
        cache.prefill(k, v, k_scale=scale, v_scale=scale)
        cache.append(k[:, :, :4], v[:, :, :4])
        cache.lengths[0] = 0 if b > 1 else cache.lengths[0]
        out, _ = cache.attend(q)
        assert bool(torch.isfinite(out).all()), ("decode", b, hq, sq, sk, d)
    print(f"ran {len(DECODE_CASES)} decode shapes from an FP8 cache")


# quantize_fp8_qkv and its smooth_k form in fp16 and bf16, one shape per kernel on sm_90 (quantize_cuda.cpp): the
# cluster kernel (few heads), a block per head (of 512 threads, and of 256 for more short heads than those fit at
# once), the streaming clusters (many heads of 98 KB, 2 blocks of 512 threads a cluster, and of 512 KB, 16 of 256)
# and the two passes. The cluster kernels' blocks write their amax into each other's shared memory; racecheck flagged
# such writes made before every block of the cluster had started (2026-11-27). No torch reduction runs (see
# DECODE_CASES).
QUANTIZE_CASES = [(1, 8, 512, 64), (8, 16, 197, 64), (32, 12, 197, 64), (4, 16, 385, 128), (1, 12, 2048, 128),
                  (1, 2, 4096, 128)]


def run_quantize_cases():
    for dtype in (torch.float16, torch.bfloat16):
        for shape in QUANTIZE_CASES:
            q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
            sdpa_ext.quantize_fp8_qkv(q, k, v)
            sdpa_ext.quantize_fp8_qkv(q, k, v, smooth_k=True)
    print(f"ran {len(QUANTIZE_CASES)} quantizer shapes x 2 input dtypes, plain and with smoothed keys")


def main(names):
    """names: variants, and `quantize` for the quantizer's cases; none: every variant and the quantizer."""
    variants = [name for name in names if name != "quantize"] if names else sdpa_ext.variant_names(
        sdpa_ext.device_arch())
    gen = torch.Generator().manual_seed(0)
    for b, hq, hkv, sq, sk, d, causal in CASES if variants else []:
        q = torch.randn(b, hq, sq, d, generator=gen).half().cuda()
        k = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        v = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        q8, qs, k8, ks, _, _ = sdpa_ext.quantize_fp8_qkv(q, k.transpose(1, 2).contiguous().transpose(1, 2), v)
        v8, vs = sdpa_ext.quantize_fp8(v.bfloat16(), torch.ones(b, hkv, device="cuda"))
        built = sdpa_ext.variant_names(sdpa_ext.device_arch(), d)
        for variant in (name for name in variants if name in built):
            # Both output dtypes, and on the one-batch shapes logits of ~2^40 in log2 units (q's scale times
            # 2^40), where the warps scale S before their exponentials (fragment_softmax.cuh's Prescale) and the
            # split merges weigh partial rows by differences of huge offsets.
            runs = [(torch.float16, 1.0), (torch.bfloat16, 1.0)] + ([(torch.float16, 2.0**40)] if b == 1 else [])
            for out_dtype, amplify in runs:
                out, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs * amplify, ks, vs, is_causal=causal,
                                              out_dtype=out_dtype, variant=variant)
                assert bool(torch.isfinite(out).all()), (variant, b, hq, sq, sk, d, amplify)
    if "decode" in variants:
        run_decode_cases()
    if not names or "quantize" in names:
        run_quantize_cases()
    torch.cuda.synchronize()
    print(f"ran {len(CASES)} shapes x {len(variants)} variants x 2 output dtypes (and huge logits on B = 1)")


if __name__ == "__main__":
    main(sys.argv[1:])
