"""timm vision transformers (RANDOM weights: pretrained=False) in fp16 on the GPU: the model's forward on torch SDPA
against the same model with F.scaled_dot_product_attention swapped for sdpa_ext's drop-in (sdpa_ext.patch_torch_sdpa,
the way vision and diffusion users swap in an attention kernel).

    python benchmarks/vit.py                                   # four ViTs at batch 32: a few minutes on an H100
    python benchmarks/vit.py --models vit_base_patch16_224 --batch 8 --rounds 1 --out r.md
    python benchmarks/vit.py --models vit_large_patch16_384 --kernels 12     # and where each forward's time goes

Every attention call of a patched model quantizes its q, k and v to E4M3 per head and runs the kernel: the speed a
user gets, quantization included. Times are CUDA-graph replays of one forward (median per round, rounds alternating
between the implementations, the median of the rounds reported), after a warm-up that brings the GPU to its
sustained clock. Accuracy compares the final features (forward_features) of the patched model with the model on
torch SDPA, on the same images: cosine and SQNR.
"""

import argparse
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path

import timm
import torch

import sdpa_ext
from sdpa_ext.attention import fallback_counts
from sdpa_ext.bench import environment, number_at_least, report
from sdpa_ext.timing import kernel_device_us, probe_cuda_us, time_cuda_graph, warm_up_cuda

# ViT-B/16 and ViT-L/16-384 (head dim 64; 197 and 577 tokens), ViT-H/14 (head dim 80) and ViT-g/14 (88): these two run
# zero-padded to head dim 128.
MODELS = ("vit_base_patch16_224", "vit_large_patch16_384", "vit_huge_patch14_224", "vit_giant_patch14_224")
IMPLEMENTATIONS = ("sdpa", "fast", "auto")  # torch SDPA (its own backend choice), then the drop-in's variants
WARM_UP_S = 3.0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="timm model names, separated by commas")
    parser.add_argument("--batch", type=number_at_least(int, 1, "--batch", "a positive integer"), default=32)
    parser.add_argument("--rounds", type=number_at_least(int, 1, "--rounds", "a positive integer"), default=3)
    parser.add_argument("--kernels", type=number_at_least(int, 0, "--kernels", "a count"), default=0,
                        help="also list the N kernels that take the most device time per forward, for each")
    parser.add_argument("--out", type=Path, help="also write the results here: JSON for a .json name, else markdown")
    return parser.parse_args(argv)


def build(name, batch):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).to("cuda", torch.float16).eval()
    block = model.blocks[0].attn
    images = torch.randn(batch, *model.pretrained_cfg["input_size"], device="cuda", dtype=torch.float16)
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    return model, images, {"model": name, "tokens": tokens, "heads": block.num_heads, "head_dim": block.head_dim}


def patched(implementation):
    return sdpa_ext.patch_torch_sdpa(variant=implementation) if implementation != "sdpa" else nullcontext()


@torch.inference_mode()
def time_models(model, images, rounds):
    """Median ms per forward by implementation; each round times every implementation once, in turn."""
    forward = lambda _: model(images)  # noqa: E731
    with patched("fast"):
        warm_up_cuda(forward, WARM_UP_S)
    samples = {implementation: [] for implementation in IMPLEMENTATIONS}
    for _ in range(rounds):
        for implementation in IMPLEMENTATIONS:
            with patched(implementation):
                call_us = probe_cuda_us(forward)
                samples[implementation].append(time_cuda_graph(forward, call_us)["median_us"] / 1e3)
    return {implementation: statistics.median(ms) for implementation, ms in samples.items()}, samples


@torch.inference_mode()
def accuracy(model, images):
    expected = model.forward_features(images).float()
    result = {}
    for implementation in IMPLEMENTATIONS[1:]:
        with patched(implementation):
            out = model.forward_features(images).float()
        noise = (out - expected).pow(2).sum()
        result[implementation] = {
            "cosine": torch.nn.functional.cosine_similarity(out.flatten(), expected.flatten(), dim=0).item(),
            "sqnr_db": (10 * torch.log10(expected.pow(2).sum() / noise)).item() if noise > 0 else float("inf"),
        }
    return result


@torch.inference_mode()
def kernel_shares(model, images, count):
    """Device us per forward by implementation: every kernel's (torch.profiler, 3 forwards) and the `count` kernel
    names that take the most in any implementation."""
    forward = lambda _: model(images)  # noqa: E731
    by_implementation = {}
    for implementation in IMPLEMENTATIONS:
        with patched(implementation):
            by_implementation[implementation] = kernel_device_us(forward, calls=3)
    tops = {name for us in by_implementation.values() for name in sorted(us, key=us.get, reverse=True)[:count]}
    return {"total_us": {i: sum(us.values()) for i, us in by_implementation.items()},
            "top": sorted(([name, {i: us.get(name, 0.0) for i, us in by_implementation.items()}] for name in tops),
                          key=lambda row: -max(row[1].values()))}


def kernel_table(shares):
    """Markdown rows of kernel_shares: a kernel a row (its name cut to 70 characters), us per forward by
    implementation, and the sum over every kernel last."""
    lines = ["| kernel | " + " | ".join(f"{i} us" for i in IMPLEMENTATIONS) + " |",
             "|---|" + "---|" * len(IMPLEMENTATIONS)]
    for name, us in shares["top"]:
        lines.append(f"| {name[:70]} | " + " | ".join(f"{us[i]:.1f}" for i in IMPLEMENTATIONS) + " |")
    lines.append("| every kernel | " + " | ".join(f"{shares['total_us'][i]:.1f}" for i in IMPLEMENTATIONS) + " |")
    return lines


def markdown(result):
    env = result["environment"]
    lines = [f"timm {env['timm']} vision transformers, RANDOM weights, fp16, batch {result['batch']}, "
             f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, commit {env['commit']}.",
             "Forward ms (CUDA-graph replay, median of rounds [range]); speed = torch SDPA ms / sdpa_ext ms "
             "(>1 is faster); features against the model on torch SDPA.", "",
             "| model | tokens | heads x D | torch SDPA ms | fast ms | fast speed | auto ms | auto speed | "
             "fast cos / SQNR dB | auto cos / SQNR dB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["models"]:
        ms = {i: f"{r['ms'][i]:.2f} [{min(r['rounds_ms'][i]):.2f}-{max(r['rounds_ms'][i]):.2f}]"
              for i in IMPLEMENTATIONS}
        speed = {i: f"{r['ms']['sdpa'] / r['ms'][i]:.3f}x" for i in IMPLEMENTATIONS[1:]}
        acc = {i: f"{r['accuracy'][i]['cosine']:.5f} / {r['accuracy'][i]['sqnr_db']:.1f}" for i in IMPLEMENTATIONS[1:]}
        lines.append(f"| {r['model']} | {r['tokens']} | {r['heads']} x {r['head_dim']} | {ms['sdpa']} | {ms['fast']} | "
                     f"{speed['fast']} | {ms['auto']} | {speed['auto']} | {acc['fast']} | {acc['auto']} |")
    for r in result["models"]:
        if "kernels" in r:
            lines += ["", f"{r['model']}: device us per forward by kernel (profiler; a kernel launched early under "
                      "programmatic dependent launch counts its wait too):", "", *kernel_table(r["kernels"])]
    lines += ["", f"Drop-in calls that ran torch SDPA instead: {result['fallbacks'] or 'none'}."]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if not (torch.cuda.is_available()
            and torch._C._dispatch_has_kernel_for_dispatch_key("sdpa::fp8_forward", "CUDA")):
        raise SystemExit("no CUDA GPU, or sdpa_ext built without CUDA")
    result = {"environment": {**environment("cuda"), "timm": timm.__version__}, "command": " ".join(sys.argv),
              "batch": args.batch, "models": []}
    for name in args.models.split(","):
        model, images, row = build(name, args.batch)
        row["ms"], row["rounds_ms"] = time_models(model, images, args.rounds)
        row["accuracy"] = accuracy(model, images)
        if args.kernels:
            row["kernels"] = kernel_shares(model, images, args.kernels)
        print(row, flush=True)
        result["models"].append(row)
        del model, images
        torch.cuda.empty_cache()
    result["fallbacks"] = fallback_counts()
    report(result, markdown(result), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
