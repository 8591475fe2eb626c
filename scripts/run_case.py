#!/usr/bin/env python3
"""Runs one variant on one shape a few times: the workload for scripts/profile.sh.

    python scripts/run_case.py --variant pipe3+swizzle --shape 1,16,4096,128 [--causal] [--iters 3]
"""

import argparse

import torch

import sdpa_ext
from sdpa_ext.bench import parse_shape


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="auto")
    parser.add_argument("--shape", type=parse_shape, default=(1, 8, 512, 64))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.shape, generator=gen).half().cuda() for _ in range(3))
    q8, qs, k8, ks, v8, vs = [x for t in (q, k, v) for x in sdpa_ext.quantize_fp8(t)]
    for _ in range(args.iters):
        out, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=args.causal, variant=args.variant)
    torch.cuda.synchronize()
    print(f"{args.variant} {'x'.join(map(str, args.shape))} causal={args.causal}: finite={bool(out.isfinite().all())}")


if __name__ == "__main__":
    main()
