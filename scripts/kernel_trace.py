#!/usr/bin/env python3
"""Where the time of one call goes: each GPU kernel it launches with its device duration (torch.profiler,
CUPTI), beside the CUDA-graph time per call that the benchmark reports. The gap between the two is launch and
drain between consecutive kernels; a one-element fill gives that floor.

    python scripts/kernel_trace.py --shape 1,8,512,64 [--causal] [--variant auto --variant fp8_split]
"""

import argparse

import torch

from sdpa_ext import timing
from sdpa_ext.bench import ShapeBench, parse_shape


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", type=parse_shape, default=(1, 8, 512, 64))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--variant", action="append", help="default: auto and fast")
    args = parser.parse_args()
    bench = ShapeBench(args.shape, args.causal, torch.float16, "cuda", max_ms=100.0)
    one = torch.zeros(1, device="cuda")
    rows = [("one-element fill", lambda i: one.fill_(i))]
    rows += [(f"kernel {v}", bench.kernel(v)) for v in args.variant or ["auto", "fast"]]
    rows += [(bench.quantize_row.removeprefix("sdpa_ext "), bench.quantize), ("end-to-end", bench.end_to_end())]
    rows += [(f"sdpa {b}", bench.sdpa(b)) for b in ("cudnn", "flash")]
    print(f"{'x'.join(map(str, args.shape))} causal={args.causal} on {torch.cuda.get_device_name()}")
    print("| row | graph us per call | kernels, device us per call |")
    print("|---|---|---|")
    for name, fn in rows:
        graph_us = timing.time_cuda_graph(fn, timing.probe_cuda_us(fn))["median_us"]
        by_time = sorted(timing.kernel_device_us(fn).items(), key=lambda item: -item[1])
        kernels = ", ".join(f"{kernel[:48]} {us:.2f}" for kernel, us in by_time)
        print(f"| {name} | {graph_us:.2f} | {kernels} |")


if __name__ == "__main__":
    main()
