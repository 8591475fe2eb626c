"""Benchmark: sdpa_ext against every PyTorch SDPA backend, in one run, on the GPU (or the CPU without one).

    python -m sdpa_ext.bench                       # 1x8x512x64, every variant and backend
    python -m sdpa_ext.bench --shape 4,16,2048,128 --causal --json out.json

Kernel time is fp8_forward on pre-quantized inputs; quantize is the three quantize_fp8 calls; end to end is
sdpa_ext.scaled_dot_product_attention from fp16/bf16. On the GPU every row is timed by CUDA-graph replay
(per-call GPU time) and by per-call CUDA events, rotating input sets so that the L2 cache does not flatter
small shapes. Accuracy columns compare each row with SDPA in fp32 on the original inputs.
"""

import argparse
import json
import math
import os
import subprocess
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

import sdpa_ext
from sdpa_ext import timing

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")


def parse_shape(text):
    dims = tuple(int(x) for x in text.split(","))
    if len(dims) != 4:
        raise argparse.ArgumentTypeError(f"--shape takes B,H,S,D, got {text!r}")
    return dims


def sdpa_backend_context(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[name]
    return sdpa_kernel([backend])


def accuracy(out, ref):
    out, ref = out.double().flatten(), ref.double().flatten()
    diff = out - ref
    noise = diff.pow(2).sum().item()
    return {
        "max_abs": diff.abs().max().item(),
        "mean_abs": diff.abs().mean().item(),
        "cosine": F.cosine_similarity(out, ref, dim=0).item(),
        "sqnr_db": math.inf if noise == 0 else 10 * math.log10(ref.pow(2).sum().item() / noise),
    }


def input_sets(shape, dtype, device, l2_bytes):
    """Enough independent (q, k, v) sets that cycling through them streams from memory, not L2."""
    per_set = 3 * math.prod(shape) * torch.finfo(dtype).bits // 8
    count = 1 if device == "cpu" else max(1, min(16, math.ceil(3 * l2_bytes / per_set)))
    gen = torch.Generator().manual_seed(0)
    return [[torch.randn(shape, generator=gen).to(dtype).to(device) for _ in range(3)] for _ in range(count)]


def timed(fn, device):
    if device == "cpu":
        return {"cpu": timing.time_cpu(fn)}
    return {"graph": timing.time_cuda_graph(fn), "events": timing.time_cuda_events(fn)}


def bench_shape(shape, is_causal, dtype, variants, device):
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device == "cuda" else 0
    sets = input_sets(shape, dtype, device, l2)
    quantized = [[x for t in s for x in sdpa_ext.quantize_fp8(t)] for s in sets]
    q, k, v = sets[0]
    reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=is_causal)
    b, h, s, d = shape
    flops = 4 * b * h * s * s * d / (2 if is_causal else 1)
    rows = []

    def add(name, kind, fn, out=None):
        row = {"name": name, "kind": kind, **timed(fn, device)}
        if out is not None:  # an attention output: FLOP rate and accuracy against SDPA in fp32
            row.update(accuracy(out, reference), tflops=flops / row[_key(device)]["median_us"] / 1e6)
        rows.append(row)

    for variant in variants:
        def kernel(i, variant=variant):
            q8, qs, k8, ks, v8, vs = quantized[i % len(quantized)]
            return sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=is_causal, out_dtype=dtype, variant=variant)

        add(f"sdpa_ext[{variant}]", "kernel", kernel, kernel(0)[0])
    add("sdpa_ext quantize q,k,v", "quantize", lambda i: [sdpa_ext.quantize_fp8(t) for t in sets[i % len(sets)]])
    end_to_end = lambda i: sdpa_ext.scaled_dot_product_attention(*sets[i % len(sets)], is_causal=is_causal)  # noqa
    add("sdpa_ext end-to-end", "end_to_end", end_to_end, end_to_end(0))

    for backend in SDPA_BACKENDS if device == "cuda" else ("math",):
        def sdpa(i, backend=backend):
            with sdpa_backend_context(backend) if device == "cuda" else nullcontext():
                return F.scaled_dot_product_attention(*sets[i % len(sets)], is_causal=is_causal)

        try:
            out = sdpa(0)
        except RuntimeError:  # backend not available for this shape/dtype/GPU
            continue
        add(f"torch sdpa {backend}", "sdpa", sdpa, out)
    best_sdpa = min((r for r in rows if r["kind"] == "sdpa"), key=lambda r: r[_key(device)]["median_us"], default=None)
    for r in rows:
        r["vs_best_sdpa"] = r[_key(device)]["median_us"] / best_sdpa[_key(device)]["median_us"] if best_sdpa else None
    return {"shape": list(shape), "causal": is_causal, "dtype": str(dtype).replace("torch.", ""), "rows": rows}


def _key(device):
    return "cpu" if device == "cpu" else "graph"


def environment(device):
    commit = os.environ.get("SDPA_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit or "unknown",
    }


def markdown(result, device):
    key = _key(device)
    label = "graph us" if device == "cuda" else "cpu us"
    lines = [f"### {'x'.join(map(str, result['shape']))} {'causal' if result['causal'] else 'non-causal'} "
             f"{result['dtype']}",
             f"| row | {label} | events us | TFLOP/s | vs best SDPA | max abs | mean abs | cos | SQNR dB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        events = f"{r['events']['median_us']:.1f}" if "events" in r else "-"
        ratio = f"{r['vs_best_sdpa']:.2f}x" if r["vs_best_sdpa"] else "-"
        quality = (f"{r['tflops']:.1f} | {ratio} | {r['max_abs']:.4f} | {r['mean_abs']:.4f} | {r['cosine']:.5f} | "
                   f"{r['sqnr_db']:.1f}") if "tflops" in r else f"- | {ratio} | - | - | - | -"
        lines.append(f"| {r['name']} | {r[key]['median_us']:.1f} | {events} | {quality} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", type=parse_shape, action="append", help="B,H,S,D (repeatable; default 1,8,512,64)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp16")
    parser.add_argument("--variant", action="append", help="variant to time (repeatable; default: auto and all)")
    parser.add_argument("--json", type=Path, help="write the results (with GPU, torch, CUDA, commit) here")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key("sdpa::fp8_forward", "CUDA")
    device = "cuda" if cuda else "cpu"
    variants = args.variant or (["auto", *sdpa_ext.variant_names()] if cuda else ["auto"])
    env = environment(device)
    print(f"device: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, commit {env['commit']}")
    if not cuda:
        print("no CUDA GPU (or no CUDA build): timing the CPU op against SDPA's math backend on the CPU")
    results = [bench_shape(shape, args.causal, DTYPES[args.dtype], variants, device)
               for shape in args.shape or [(1, 8, 512, 64)]]
    for result in results:
        print(markdown(result, device))
    if args.json:
        args.json.write_text(json.dumps({**env, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
