#!/usr/bin/env python3
"""Small calls of every CUDA variant (or of the variants named on the command line) and of quantization, for
compute-sanitizer (scripts/sanitize.sh)."""

import sys

import torch

import sdpa_ext

# (B, Hq, Hkv, Sq, Sk, D, causal): partial tiles, GQA, both head dims, Sq != Sk in both directions, and enough
# keys that the Hopper kernels' 3-slot ring wraps around (5 tiles of 128 keys at D = 64, 10 of 64 at D = 128), and
# a grid of 256 blocks whose kv heads from the 33rd on `wgmma+predecode` decodes inside the grid (three chunks of
# keys per block through two buffers) on a GPU of up to 132 SMs, also causal (groups of 33 kv heads, the second
# decoded in the grid); causal 600 x 600 at D = 64 has `wgmma_m192` groups that leave out the last of their block's
# tiles, or all five (rows past seqlen_q).
CASES = [(1, 2, 2, 17, 33, 64, True), (2, 4, 2, 64, 64, 64, False), (1, 2, 1, 40, 129, 128, True),
         (1, 2, 2, 129, 1, 128, False), (1, 2, 2, 130, 600, 64, False), (1, 2, 1, 200, 600, 128, True),
         (8, 32, 8, 64, 700, 64, False), (8, 32, 8, 64, 700, 64, True), (1, 2, 2, 600, 600, 64, True)]


def main(names):
    variants = names or sdpa_ext.variant_names(sdpa_ext.device_arch())
    gen = torch.Generator().manual_seed(0)
    for b, hq, hkv, sq, sk, d, causal in CASES:
        q = torch.randn(b, hq, sq, d, generator=gen).half().cuda()
        k = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        v = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        q8, qs, k8, ks, _, _ = sdpa_ext.quantize_fp8_qkv(q, k.transpose(1, 2).contiguous().transpose(1, 2), v)
        v8, vs = sdpa_ext.quantize_fp8(v.bfloat16(), torch.ones(b, hkv, device="cuda"))
        for variant in variants:
            for out_dtype in (torch.float16, torch.bfloat16):
                out, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=causal, out_dtype=out_dtype,
                                              variant=variant)
                assert bool(torch.isfinite(out).all()), (variant, b, hq, sq, sk, d)
    torch.cuda.synchronize()
    print(f"ran {len(CASES)} shapes x {len(variants)} variants x 2 output dtypes")


if __name__ == "__main__":
    main(sys.argv[1:])
