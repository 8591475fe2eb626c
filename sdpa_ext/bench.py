"""Benchmark: sdpa_ext against every PyTorch SDPA backend, in one run, on the GPU (or the CPU without one).

    python -m sdpa_ext.bench                                  # preset 'mission': 1x8x512x64
    python -m sdpa_ext.bench --preset sweep --json r.json --plot r.png
    python -m sdpa_ext.bench --shape 4,16,2048,128 --causal --variant auto --variant pipe3+swizzle
    python -m sdpa_ext.bench --preset targets --variant auto --rounds 5     # medians over 5 interleaved passes
    python -m sdpa_ext.bench --preset targets --variant auto --sustained 3  # each row after 3 s of itself
    python -m sdpa_ext.bench --preset decode --rounds 3       # decode from an FP8 cache (bench_decode.py)

Rows: each sdpa_ext variant's kernel (fp8_forward on pre-quantized inputs), the drop-in's quantization (of q, k and
v, or of k and v where the kernel quantizes q itself: sdpa_ext.attention.kernel_quantizes_query), the end-to-end
drop-in from fp16/bf16 for each tier (`auto`: full, `fast`) with the quantization's share of it (its time beyond
the same tier's kernel row where that ran, which counts quantization folded into a kernel too; else the quantize
row's time), and
every PyTorch SDPA backend on the same fp16/bf16 inputs. On the GPU each
row is timed by CUDA-graph replay (GPU time per call; the ratios use it) and by per-call CUDA events (median,
p90; launch overhead included), cycling through enough input sets that the L2 cache does not flatter small
shapes. Accuracy columns compare each attention row with SDPA in fp32 on the original inputs.

A GPU at its power limit clocks each kernel by the power it draws, and it takes about a second to settle. By default
the rows of a shape follow one another after WARM_UP_S of the first variant, so they run at much the same clock,
which the mix of rows before them sets. With --sustained S each row runs alone for S seconds right before each of
its timings, so that it is timed at the clock its own kernel sustains; the SM clock and board power during the
timing (nvidia-smi) are then reported beside the time.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

import sdpa_ext
from sdpa_ext import timing
from sdpa_ext.attention import SMOOTH_KEYS_DEFAULT, kernel_head_dim, kernel_quantizes_query, quantize_inputs

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
WARM_UP_S = 2.0  # of the first variant on each shape, before its rows are timed (timing.warm_up_cuda)
PRESETS = {
    "mission": [(1, 8, 512, 64)],
    "seeds": [(1, 2, 64, 64), (1, 4, 128, 64), (1, 8, 512, 64), (2, 2, 64, 64), (2, 8, 256, 64), (1, 8, 2048, 64)],
    "sweep": [(1, 16, s, d) for d in (64, 128) for s in (512, 1024, 2048, 4096, 8192, 16384)],
    # The performance targets: the mission shape and the large shapes (run with and without --causal).
    "targets": [(1, 8, 512, 64), (4, 16, 2048, 64), (4, 16, 2048, 128), (1, 16, 8192, 128)],
}


def parse_shape(text):
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 4 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--shape takes B,H,S,D with positive integers, got {text!r}")
    return dims


def number_at_least(convert, least, option, what):
    """An argparse type: convert(text) when it is at least `least` (so never NaN), else an error naming `option`."""
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not value >= least:
            raise argparse.ArgumentTypeError(f"{option} takes {what}, got {text!r}")
        return value
    return parse


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


def input_sets(shape, dtype, device):
    """Enough independent (q, k, v) sets that cycling through them streams from memory, not L2."""
    per_set = 3 * math.prod(shape) * torch.finfo(dtype).bits // 8
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device == "cuda" else 0
    count = 1 if device == "cpu" else max(1, min(16, math.ceil(3 * l2 / per_set)))
    gen = torch.Generator().manual_seed(0)
    return [[torch.randn(shape, generator=gen).to(dtype).to(device) for _ in range(3)] for _ in range(count)]


# The drop-in's end-to-end rows, one per tier: "sdpa_ext end-to-end" keeps the name that result files and
# scripts/summarize.py know.
END_TO_END_ROWS = {"auto": "sdpa_ext end-to-end", "fast": "sdpa_ext end-to-end [fast]"}


class ShapeBench:
    """Times every row for one (shape, causal, dtype), in `rounds` passes over the rows (see run)."""

    def __init__(self, shape, is_causal, dtype, device, max_ms, rounds=1, sustained_s=0.0):
        self.shape, self.is_causal, self.dtype, self.device, self.max_ms = shape, is_causal, dtype, device, max_ms
        self.rounds, self.sustained_s = rounds, sustained_s
        self.timed_rows = []  # (row, fn) of every row that was timed, for the later rounds
        self.sets = input_sets(shape, dtype, device)
        b, h, s, d = shape
        # Kernel rows at a head dim without kernels (80, 88, ...) run as the drop-in does: codes zero-padded to the
        # next kernel head dim, the softmax scale of the true one, the padded output dims cut off.
        self.width = kernel_head_dim(d)
        self.softmax_scale = None if self.width == d else 1.0 / math.sqrt(d)
        self.quantized = [sdpa_ext.quantize_fp8_qkv(*s, codes_width=self.width) for s in self.sets] if self.width \
            else []
        q, k, v = self.sets[0]
        self.reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=is_causal)
        self.flops = 4 * b * h * s * s * d / (2 if is_causal else 1)
        self.rows = []
        # What the drop-in quantizes before the kernel: k and v where the kernel quantizes q itself, else q, k, v.
        self.kernel_quantizes_q = kernel_quantizes_query(q, self.width, "auto", SMOOTH_KEYS_DEFAULT)
        self.quantize_row = "sdpa_ext quantize k,v (q in the kernel)" if self.kernel_quantizes_q else \
            "sdpa_ext quantize q,k,v"

    def add(self, name, kind, fn, out=None):
        row = {"name": name, "kind": kind}
        if self.device == "cpu":
            row["cpu"] = timing.time_cpu(fn)
            row["time_us"] = row["cpu"]["median_us"]
        else:
            call_us = timing.probe_cuda_us(fn)
            if call_us > self.max_ms * 1e3:
                row.update(skipped=f"one call took {call_us / 1e3:.0f} ms > --max-ms {self.max_ms}")
                self.rows.append(row)
                return
            row["call_us"] = call_us
            row["graph"] = self.time_graph(row, fn)
            row["events"] = timing.time_cuda_events(fn, call_us)
            row["time_us"] = row["graph"]["median_us"]
        row["rounds_us"] = [row["time_us"]]
        self.timed_rows.append((row, fn))
        if out is not None:  # an attention output: FLOP rate and accuracy against SDPA in fp32
            row.update(accuracy(out, self.reference), tflops=self.flops / row["time_us"] / 1e6)
        self.rows.append(row)

    def kernel(self, variant):
        def call(i):
            q8, qs, k8, ks, v8, vs = self.quantized[i % len(self.quantized)]
            out, lse = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, is_causal=self.is_causal, scale=self.softmax_scale,
                                            out_dtype=self.dtype, variant=variant)
            return out[..., :self.shape[3]], lse
        return call

    def quantize(self, i):
        """The drop-in's quantization (quantize_row), keys smoothed or not as it does by default."""
        return quantize_inputs(*self.sets[i % len(self.sets)], self.width, "auto", SMOOTH_KEYS_DEFAULT)

    def end_to_end(self, variant="auto"):
        def call(i):
            return sdpa_ext.scaled_dot_product_attention(*self.sets[i % len(self.sets)], is_causal=self.is_causal,
                                                         variant=variant)
        return call

    def sdpa(self, backend):
        def call(i):
            with sdpa_backend_context(backend) if self.device == "cuda" else nullcontext():
                return F.scaled_dot_product_attention(*self.sets[i % len(self.sets)], is_causal=self.is_causal)
        return call

    def time_graph(self, row, fn):
        """CUDA-graph replay of a row; with --sustained after sustained_s of the row alone, sampling the clock."""
        if not self.sustained_s:
            return timing.time_cuda_graph(fn, row["call_us"])
        timing.warm_up_cuda(fn, self.sustained_s)
        with timing.ClockSampler(torch.cuda.current_device()) as sampler:
            graph = timing.time_cuda_graph(fn, row["call_us"])
        clocks = sampler.result()
        if clocks is not None:
            row.setdefault("clocks", []).append(clocks)
        return graph

    def retime(self, row, fn):
        """One more reading of a timed row: CUDA-graph replay on the GPU, the host clock on the CPU."""
        if self.device == "cpu":
            return timing.time_cpu(fn)["median_us"]
        return self.time_graph(row, fn)["median_us"]

    def run(self, variants):
        """Times every row once, then rounds - 1 more times over all rows, in reverse order every other round, so
        that a drift of the GPU's clock during the run weighs on every row alike; each row's time is its median
        over the rounds, and the ratios compare those. On the GPU the first variant runs for WARM_UP_S before
        any timing (timing.warm_up_cuda), unless every row warms itself up (--sustained)."""
        variants = variants if self.width else []  # no kernel holds this head dim: the drop-in runs torch SDPA
        if self.device == "cuda" and variants and not self.sustained_s:
            timing.warm_up_cuda(self.kernel(variants[0]), WARM_UP_S)
        for variant in variants:
            self.add(f"sdpa_ext[{variant}]", "kernel", self.kernel(variant), self.kernel(variant)(0)[0])
        self.add(self.quantize_row, "quantize", self.quantize)
        for tier, name in END_TO_END_ROWS.items():
            self.add(name, "end_to_end", self.end_to_end(tier), self.end_to_end(tier)(0))
        for backend in SDPA_BACKENDS if self.device == "cuda" else ("math",):
            try:
                out = self.sdpa(backend)(0)
            except RuntimeError:  # backend not available for this shape/dtype/GPU
                continue
            self.add(f"torch sdpa {backend}", "sdpa", self.sdpa(backend), out)
        for round_index in range(1, self.rounds):
            for row, fn in self.timed_rows[::-1] if round_index % 2 else self.timed_rows:
                row["rounds_us"].append(self.retime(row, fn))
        for row, _ in self.timed_rows:
            row["time_us"] = statistics.median(row["rounds_us"])
            if "tflops" in row:
                row["tflops"] = self.flops / row["time_us"] / 1e6
        timed = [r for r in self.rows if "time_us" in r]
        best = min((r["time_us"] for r in timed if r["kind"] == "sdpa"), default=None)
        quantize = next((r["time_us"] for r in timed if r["kind"] == "quantize"), None)
        kernels = {r["name"]: r["time_us"] for r in timed if r["kind"] == "kernel"}
        tiers = {name: tier for tier, name in END_TO_END_ROWS.items()}
        for r in timed:
            r["vs_best_sdpa"] = r["time_us"] / best if best else None
            if r["kind"] == "end_to_end":
                kernel = kernels.get(f"sdpa_ext[{tiers[r['name']]}]")
                extra = r["time_us"] - kernel if kernel is not None else quantize
                if extra is not None:
                    r["quantize_share"] = max(extra, 0.0) / r["time_us"]
        return {"shape": list(self.shape), "causal": self.is_causal, "dtype": str(self.dtype).replace("torch.", ""),
                "flops": self.flops, "rows": self.rows}


def git_commit():
    """HEAD's short hash, with "+changes" where tracked files differ from it: a GPU machine that receives a
    working tree may carry the git metadata of an older commit (every JSON file of 2026-11-27 and 28 named one)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent)

    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    if head and git("diff", "--quiet", "HEAD", "--").returncode == 1:
        head += "+changes"
    return head


def environment(device):
    commit = os.environ.get("SDPA_COMMIT") or git_commit()
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit or "unknown",
    }


def report(result, table, path):
    """Prints a script's result table, and writes it to `path` if given: JSON (the table included) for a .json name,
    else the table."""
    print(table)
    if path:
        path.write_text(json.dumps({**result, "markdown": table}, indent=1) if path.suffix == ".json" else table + "\n")


def markdown(result, device):
    label = "graph us" if device == "cuda" else "cpu us"
    lines = [f"### {'x'.join(map(str, result['shape']))} {'causal' if result['causal'] else 'non-causal'} "
             f"{result['dtype']}",
             f"| row | {label} | events us (p90) | TFLOP/s | vs best SDPA | max abs | mean abs | cos | SQNR dB | "
             "quantize share |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['name']} | skipped: {r['skipped']} | | | | | | | | |")
            continue
        events = f"{r['events']['median_us']:.1f} ({r['events']['p90_us']:.1f})" if "events" in r else "-"
        spread = f" [{min(r['rounds_us']):.1f}-{max(r['rounds_us']):.1f}]" if len(r["rounds_us"]) > 1 else ""
        if r.get("clocks"):  # --sustained: the clock and power the row ran at (medians over its rounds)
            spread += (f" @ {statistics.median(c['sm_mhz'] for c in r['clocks']):.0f} MHz "
                       f"{statistics.median(c['power_w'] for c in r['clocks']):.0f} W")
        ratio = f"{r['vs_best_sdpa']:.2f}x" if r["vs_best_sdpa"] else "-"
        quality = (f"{r['tflops']:.1f} | {ratio} | {r['max_abs']:.4f} | {r['mean_abs']:.4f} | {r['cosine']:.5f} | "
                   f"{r['sqnr_db']:.1f}") if "tflops" in r else f"- | {ratio} | - | - | - | -"
        share = f"{r['quantize_share']:.0%}" if "quantize_share" in r else "-"
        lines.append(f"| {r['name']} | {r['time_us']:.1f}{spread} | {events} | {quality} | {share} |")
    return "\n".join(lines)


def plot(results, path):
    """TFLOP/s against sequence length, one line per row, one panel per (head dim, causal, dtype)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no plot written", file=sys.stderr)
        return
    panels = sorted({(r["shape"][3], r["causal"], r["dtype"]) for r in results})
    fig, axes = plt.subplots(1, len(panels), figsize=(9.5 * len(panels), 5), squeeze=False)
    for ax, (head_dim, causal, dtype) in zip(axes[0], panels):
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)  # one distinct color per row
        series = {}
        for result in results:
            if (result["shape"][3], result["causal"], result["dtype"]) != (head_dim, causal, dtype):
                continue
            for r in result["rows"]:
                if "tflops" in r:
                    series.setdefault(r["name"], []).append((result["shape"][2], r["tflops"]))
        for name, points in sorted(series.items()):
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=name, linestyle="--" if name.startswith("torch") else "-")
        ax.set(xscale="log", xlabel="sequence length", ylabel="TFLOP/s",
               title=f"D={head_dim} {'causal' if causal else 'non-causal'} {dtype}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def progress(items, enabled):
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc="shapes", file=sys.stderr)
    except ImportError:
        return items


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted([*PRESETS, "decode"]),
                        help="named shape set (default: mission); 'decode': KV-cache decode rows (GPU only)")
    parser.add_argument("--shape", type=parse_shape, action="append", help="B,H,S,D (repeatable)")
    parser.add_argument("--causal", action="store_true", help="causal mask (top-left aligned)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), action="append", help="fp16 and/or bf16 (default fp16)")
    parser.add_argument("--variant", action="append", help="variant to time (repeatable; default: auto and all)")
    parser.add_argument("--max-ms", type=float, default=100.0, help="skip a row whose single call takes longer")
    parser.add_argument("--rounds", type=number_at_least(int, 1, "--rounds", "a positive integer"), default=1,
                        help="time every row this many times, alternating the order; report medians [min-max]")
    parser.add_argument("--sustained", type=number_at_least(float, 0.0, "--sustained", "seconds >= 0"), default=0.0,
                        metavar="S",
                        help="GPU: run each row alone for S seconds before each of its timings and report the SM "
                             "clock and power it ran at (a GPU at its power limit clocks each kernel by its power)")
    parser.add_argument("--json", type=Path, help="write the results (with GPU, torch, CUDA, commit) here")
    parser.add_argument("--plot", type=Path, help="write a PNG of TFLOP/s against sequence length here")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key("sdpa::fp8_forward", "CUDA")
    device = "cuda" if cuda else "cpu"
    if args.preset == "decode":
        return run_decode(args, cuda)
    shapes = (args.shape or []) + (PRESETS[args.preset] if args.preset else [])
    shapes = shapes or PRESETS["mission"]
    env = environment(device)
    print(f"device: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, commit {env['commit']}")
    if not cuda:
        print("no CUDA GPU (or no CUDA build): timing the CPU op against SDPA's math backend on the CPU")
    jobs = [(shape, DTYPES[d]) for shape in shapes for d in (args.dtype or ["fp16"])]
    results = []
    for shape, dtype in progress(jobs, len(jobs) > 1):
        shape_bench = ShapeBench(shape, args.causal, dtype, device, args.max_ms, args.rounds, args.sustained)
        default = ["auto", "fast", *sdpa_ext.variant_names(sdpa_ext.device_arch(), shape_bench.width)] if cuda \
            else ["auto"]
        results.append(shape_bench.run(args.variant or default))
        if cuda:
            torch.cuda.empty_cache()  # the next shape's input sets may be larger
    for result in results:
        print(markdown(result, device))
    if args.json:
        args.json.write_text(json.dumps({**env, "command": " ".join(sys.argv), "results": results}, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


def run_decode(args, cuda):
    if not cuda:
        print("--preset decode times GPU kernels against the GPU's SDPA backends: no CUDA GPU (or no CUDA build)")
        return 1
    from sdpa_ext import bench_decode

    env = environment("cuda")
    print(f"device: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, commit {env['commit']}")
    result, table = bench_decode.run(args.variant or ["auto"], args.rounds)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({**env, "command": " ".join(sys.argv), **result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
