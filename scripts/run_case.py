#!/usr/bin/env python3
"""Runs one variant (or one PyTorch SDPA backend on fp16 inputs) on one shape a few times: the workload for
scripts/profile.sh and scripts/cycles.sh. The last call runs inside the NVTX range "measured".

    python scripts/run_case.py --variant pipe3+swizzle --shape 1,16,4096,128 [--causal] [--iters 3]
    python scripts/run_case.py --sdpa cudnn --shape 4,16,2048,128
"""

import argparse

import torch

import sdpa_ext
from sdpa_ext.bench import number_at_least, parse_shape, sdpa_backend_context


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="auto")
    parser.add_argument("--sdpa", help="a PyTorch SDPA backend (cudnn, flash, efficient, math) instead of a variant")
    parser.add_argument("--shape", type=parse_shape, default=(1, 8, 512, 64))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--iters", type=number_at_least(int, 1, "--iters", "a positive integer"), default=3)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.shape, generator=gen).half().cuda() for _ in range(3))
    if args.sdpa:
        name = f"sdpa {args.sdpa}"

        def call():
            with sdpa_backend_context(args.sdpa):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    else:
        name = args.variant
        q8, qs, k8, ks, v8, vs = [x for t in (q, k, v) for x in sdpa_ext.quantize_fp8(t)]

        def call():
            out, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=args.causal, variant=args.variant)
            return out

    for i in range(args.iters):
        if i + 1 == args.iters:
            torch.cuda.nvtx.range_push("measured")
        out = call()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{name} {'x'.join(map(str, args.shape))} causal={args.causal}: finite={bool(out.isfinite().all())}")


if __name__ == "__main__":
    main()
