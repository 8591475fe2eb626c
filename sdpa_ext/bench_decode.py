"""Decode benchmark (`python -m sdpa_ext.bench --preset decode`): a few query rows against a KV cache, sdpa_ext
from an FP8 cache (q in bf16, quantized by the kernel per call) against every PyTorch SDPA backend on the same cache
in bf16, in one run, GPU time per call from CUDA-graph replay.

Decode reads the cache once per call, so its floor is bytes over bandwidth: the table gives each sdpa_ext row's
share of the GPU's measured copy bandwidth (bytes read + written by a 1 GiB device-to-device copy) on the FP8 bytes
of K and V, and of the datasheet bandwidth. Rows with Sq > 1 (speculative decoding, a chunk after the cache) are
causal, bottom-right aligned (torch's causal_lower_right).
"""

import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import sdpa_ext
from sdpa_ext import timing
from sdpa_ext.bench import SDPA_BACKENDS, sdpa_backend_context

# (B, Hq, Hkv, Sq, Sk, D): Llama-8B-like heads at growing batch and context, B = 1 at 4k (one user's chat, where
# the cache fills few SMs) and at 128k keys, D = 64, the speculative-decoding rows of 4 and 16 queries at 32k keys
# and of 16 at B = 1 and 4k, and Gemma-2-9B-like heads (D = 256).
DECODE_SHAPES = [
    (1, 32, 8, 1, 4096, 128),
    (8, 32, 8, 1, 4096, 128),
    (32, 32, 8, 1, 4096, 128),
    (8, 32, 8, 1, 32768, 128),
    (1, 32, 8, 1, 131072, 128),
    (16, 32, 8, 1, 8192, 64),
    (8, 32, 8, 4, 32768, 128),
    (8, 32, 8, 16, 32768, 128),
    (1, 32, 8, 16, 4096, 128),
    (8, 16, 8, 1, 8192, 256),
]
DATASHEET_TB_S = {"H100": 3.35, "H200": 4.8}  # HBM bandwidth of the SXM parts, by name


def copy_bandwidth_tb_s(bytes_each_way=1 << 30):
    """Bytes read + written per second by a device-to-device copy (median of 10 after warm-up)."""
    src = torch.empty(bytes_each_way, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * bytes_each_way / statistics.median(times) / 1e12


def datasheet_tb_s():
    name = torch.cuda.get_device_name()
    return next((tb for key, tb in DATASHEET_TB_S.items() if key in name), None)


class DecodeBench:
    """The rows of one decode shape, cycling through enough caches that they stream from memory, not L2."""

    def __init__(self, shape, rounds=1):
        b, hq, hkv, sq, sk, d = shape
        self.shape, self.rounds = shape, rounds
        self.fp8_bytes = 2 * b * hkv * sk * d
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        count = max(1, min(4, math.ceil(3 * l2 / self.fp8_bytes)))
        gen = torch.Generator().manual_seed(0)
        self.sets = []
        for _ in range(count):
            q = torch.randn(b, hq, sq, d, generator=gen).bfloat16().cuda()
            k, v = (torch.randn(b, hkv, sk, d, generator=gen).bfloat16().cuda() for _ in range(2))
            _, _, k8, ks, v8, vs = sdpa_ext.quantize_fp8_qkv(q, k, v)
            self.sets.append((q, k, v, k8, ks, v8, vs))
        self.lengths = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        self.mask = causal_lower_right(sq, sk) if sq > 1 else None
        q, k, v = (t.float() for t in self.sets[0][:3])
        self.reference = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, enable_gqa=True)
        self.rows = []

    def ours(self, variant):
        def call(i):
            q, _, _, k8, ks, v8, vs = self.sets[i % len(self.sets)]
            return sdpa_ext.fp8_forward(q, k8, v8, None, ks, vs, self.mask is not None, None, torch.bfloat16, variant,
                                        seqlens_k=self.lengths, causal_alignment="bottom_right")[0]
        return call

    def sdpa(self, backend):
        def call(i):
            q, k, v = self.sets[i % len(self.sets)][:3]
            with sdpa_backend_context(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, enable_gqa=True)
        return call

    def add(self, name, kind, fn):
        try:
            out = fn(0)
        except RuntimeError:  # a backend that does not take this shape, mask or GQA
            return
        call_us = timing.probe_cuda_us(fn)
        out = out.double().flatten()
        row = {"name": name, "kind": kind, "call_us": call_us,
               "cosine": F.cosine_similarity(out, self.reference.double().flatten(), dim=0).item(),
               "rounds_us": [timing.time_cuda_graph(fn, call_us)["median_us"]], "fn": fn}
        self.rows.append(row)

    def run(self, variants):
        timing.warm_up_cuda(self.ours(variants[0]), 1.0)
        for variant in variants:
            self.add(f"sdpa_ext[{variant}] fp8 cache", "ours", self.ours(variant))
        for backend in SDPA_BACKENDS:
            self.add(f"torch sdpa {backend} bf16 cache", "sdpa", self.sdpa(backend))
        for round_index in range(1, self.rounds):  # interleaved rounds, reversed every other one (bench.py)
            for row in self.rows[::-1] if round_index % 2 else self.rows:
                row["rounds_us"].append(timing.time_cuda_graph(row["fn"], row["call_us"])["median_us"])
        for row in self.rows:
            row["time_us"] = statistics.median(row["rounds_us"])
            del row["fn"]
        best = min((r["time_us"] for r in self.rows if r["kind"] == "sdpa"), default=None)
        for row in self.rows:
            row["vs_best_sdpa"] = row["time_us"] / best if best else None
        return {"shape": list(self.shape), "fp8_bytes": self.fp8_bytes, "rows": self.rows}


def markdown(results, copy_tb_s, sheet_tb_s):
    lines = [f"copy bandwidth (read + write): {copy_tb_s:.2f} TB/s; datasheet: "
             + (f"{sheet_tb_s:.2f} TB/s" if sheet_tb_s else "unknown"), "",
             "| B, Hq, Hkv, Sq, Sk, D | row | graph us | vs best SDPA | FP8 bytes / copy BW | of datasheet BW | cos |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        shape = ", ".join(map(str, result["shape"]))
        for r in result["rows"]:
            spread = f" [{min(r['rounds_us']):.1f}-{max(r['rounds_us']):.1f}]" if len(r["rounds_us"]) > 1 else ""
            ratio = f"{r['vs_best_sdpa']:.2f}x" if r["vs_best_sdpa"] else "-"
            achieved = result["fp8_bytes"] / r["time_us"] / 1e6  # TB/s on the FP8 bytes
            share = f"{achieved / copy_tb_s:.0%}" if r["kind"] == "ours" else "-"
            sheet = f"{achieved / sheet_tb_s:.0%}" if r["kind"] == "ours" and sheet_tb_s else "-"
            lines.append(f"| {shape} | {r['name']} | {r['time_us']:.1f}{spread} | {ratio} | {share} | {sheet} | "
                         f"{r['cosine']:.5f} |")
    return "\n".join(lines)


def run(variants, rounds, shapes=None):
    """Times every decode shape; returns (results, markdown)."""
    copy_tb_s, sheet_tb_s = copy_bandwidth_tb_s(), datasheet_tb_s()
    results = []
    for shape in shapes or DECODE_SHAPES:
        results.append(DecodeBench(shape, rounds).run(variants))
        torch.cuda.empty_cache()
    return {"copy_tb_s": copy_tb_s, "datasheet_tb_s": sheet_tb_s, "results": results}, markdown(results, copy_tb_s,
                                                                                                 sheet_tb_s)
