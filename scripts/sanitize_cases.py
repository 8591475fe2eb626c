#!/usr/bin/env python3
"""Small calls of every CUDA variant and of quantization, for compute-sanitizer (scripts/sanitize.sh)."""

import torch

import sdpa_ext

# (B, Hq, Hkv, Sq, Sk, D, causal): partial tiles, GQA, both head dims, Sq != Sk in both directions.
CASES = [(1, 2, 2, 17, 33, 64, True), (2, 4, 2, 64, 64, 64, False), (1, 2, 1, 40, 129, 128, True),
         (1, 2, 2, 129, 1, 128, False)]


def main():
    gen = torch.Generator().manual_seed(0)
    for b, hq, hkv, sq, sk, d, causal in CASES:
        q = torch.randn(b, hq, sq, d, generator=gen).half().cuda()
        k = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        v = torch.randn(b, hkv, sk, d, generator=gen).half().cuda()
        q8, qs, k8, ks, _, _ = sdpa_ext.quantize_fp8_qkv(q, k.transpose(1, 2).contiguous().transpose(1, 2), v)
        v8, vs = sdpa_ext.quantize_fp8(v.bfloat16(), torch.ones(b, hkv, device="cuda"))
        for variant in sdpa_ext.variant_names(sdpa_ext.device_arch()):
            for out_dtype in (torch.float16, torch.bfloat16):
                out, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=causal, out_dtype=out_dtype,
                                              variant=variant)
                assert bool(torch.isfinite(out).all()), (variant, b, hq, sq, sk, d)
    torch.cuda.synchronize()
    print(f"ran {len(CASES)} shapes x {len(sdpa_ext.variant_names(sdpa_ext.device_arch()))} variants x 2 output dtypes")


if __name__ == "__main__":
    main()
