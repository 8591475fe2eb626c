"""Prefill and decode of a Llama-architecture model (random weights) in transformers, in bf16 on the GPU: torch SDPA
against sdpa_ext's registered attention with its FP8Cache.

    python benchmarks/llama_decode.py                         # 8B layer dims, 8 layers: about a minute on an H100
    python benchmarks/llama_decode.py --contexts 4096 --batches 1,4,16 --steps 50 --out r.md
    python benchmarks/llama_decode.py --smoke                 # tiny sizes on the CPU: checks the script runs

Two SDPA baselines. "StaticCache" is transformers' preallocated cache as shipped: it is compileable, so transformers
materializes the mask of every decode step over all max_cache_len slots, and its SDPA path then repeats K/V to every
query head and runs torch's masked (efficient-attention) kernel. "bf16 prefix cache" is the same preallocated bf16
buffers handing attention only the rows written so far, like FP8Cache does, so decode steps get no mask and torch
SDPA reads each K/V head once (native GQA, no repeat): the like-for-like baseline for the kernel and the cache format.

The 8B model's 32 layers do not fit an 80 GB GPU next to a B=16, 32k-token bf16 cache (137 GB), so --layers
defaults to 8 (a 17 GB cache): per-layer work is the same, and so are the ratios. Decode rows fill each cache to the
context length with the same random K/V through the cache's own update(), instead of running a 512k-token prefill
through the model, then time the model's forward for one new token per sequence (CUDA events, after warm-up, median).
Eager transformers spends about a millisecond of Python per layer and step, which hides the attention at small
batches. The "CUDA graph ms/step" rows capture one step and replay it, as a serving loop does (CUDA events around
each replay, median): the forward without that overhead. Each replay appends one token to the cache it was captured
with, so it decodes at the context length (plus the replays so far). Torch SDPA on the prefix cache may pick any
backend there (cuDNN included: a fixed key length builds its plan once, at capture). StaticCache is captured as
transformers ships it (its mask materialized over max_cache_len). The "GPU busy ms/step" rows take the union of
the eager step's kernel intervals (profiler).
The cosine line runs a smaller generate under compare_with_sdpa(): every attention call against torch SDPA in fp32
on the unquantized inputs.
"""

import argparse
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface, AttentionMaskInterface, AutoModelForCausalLM, LlamaConfig, StaticCache
from transformers.cache_utils import Cache, StaticLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from sdpa_ext.bench import environment, number_at_least, report
from sdpa_ext.integrations import transformers as sdpa_hf

EIGHT_B = dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256, rope_theta=500000.0)
SMOKE = dict(hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64, vocab=512, layers=2, contexts=[64, 128],
             batches=[1, 2], steps=3, warmup=1, prefill_batch=2, prefill_len=32, compare_prompt=32, compare_tokens=4)
IMPLEMENTATIONS = ("static", "prefix", "sdpa_ext")
LABELS = {"static": "SDPA + StaticCache", "prefix": "SDPA + bf16 prefix cache", "sdpa_ext": "sdpa_ext + FP8Cache"}


def int_list(option):
    def parse(text):
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"{option} takes positive integers separated by commas, got {text!r}")
        return values
    return parse


def positive(option):
    return number_at_least(int, 1, option, "a positive integer")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny model and sizes on the CPU (tests the script)")
    parser.add_argument("--layers", type=positive("--layers"), default=8, help="decoder layers (8B: 32)")
    for name, value in EIGHT_B.items():
        option = "--" + name.replace("_", "-")
        kind = float if isinstance(value, float) else int
        parser.add_argument(option, type=number_at_least(kind, 1, option, "a number >= 1"), default=value,
                            help=f"model dimension (default {value}, Llama 3 8B)")
    parser.add_argument("--contexts", type=int_list("--contexts"), default=[4096, 32768],
                        help="tokens in the cache before the timed decode steps")
    parser.add_argument("--batches", type=int_list("--batches"), default=[1, 16], help="sequences per decode step")
    parser.add_argument("--steps", type=positive("--steps"), default=20, help="timed decode steps (median)")
    parser.add_argument("--warmup", type=positive("--warmup"), default=5, help="untimed steps before them")
    parser.add_argument("--prefill-batch", type=positive("--prefill-batch"), default=4)
    parser.add_argument("--prefill-len", type=positive("--prefill-len"), default=2048)
    parser.add_argument("--compare-prompt", type=positive("--compare-prompt"), default=1024,
                        help="prompt tokens of the comparison run (batch 1)")
    parser.add_argument("--compare-tokens", type=positive("--compare-tokens"), default=16,
                        help="tokens the comparison run generates")
    parser.add_argument("--out", type=Path, help="also write the results here: JSON for a .json name, else markdown")
    smoke = parser.parse_known_args(argv)[0].smoke
    if smoke:
        parser.set_defaults(**SMOKE)  # options given on the command line still win
    return parser.parse_args(argv)


def pick_device(smoke):
    if smoke:
        return "cpu"
    if not (torch.cuda.is_available()
            and torch._C._dispatch_has_kernel_for_dispatch_key("sdpa::fp8_forward", "CUDA")):
        raise SystemExit("no CUDA GPU, or sdpa_ext built without CUDA: run with --smoke to test on the CPU")
    return "cuda"


def build_model(args, device):
    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                         num_hidden_layers=args.layers, vocab_size=args.vocab, rope_theta=args.rope_theta,
                         max_position_embeddings=max(*args.contexts, args.prefill_len, args.compare_prompt)
                         + args.warmup + 2 * args.steps + args.compare_tokens)
    torch.manual_seed(0)
    with torch.device(device):  # initialize on the device: the CPU takes minutes for billions of weights
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval()


class PrefixLayer(StaticLayer):
    """transformers' StaticLayer (preallocated bf16 buffers), except that attention gets only the rows written so far
    and the layer is not compileable: transformers then leaves out the mask of a one-token decode step, as it does for
    FP8Cache, and SDPA reads only the valid keys, with native GQA. The same cache as FP8Cache, in bf16."""

    is_compileable = False

    def __init__(self, max_cache_len):
        super().__init__(max_cache_len)
        self.length = 0  # on the host, so that slicing needs no device sync

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states)
        self.length += key_states.size(2)
        return keys[:, :, :self.length], values[:, :, :self.length]

    def get_mask_sizes(self, query_length):
        return self.length + query_length, 0

    def get_seq_length(self):
        return self.length


def make_cache(implementation, model, batch, capacity, device):
    if implementation == "static":
        return StaticCache(model.config, max_cache_len=capacity)
    if implementation == "prefix":
        return Cache(layers=[PrefixLayer(capacity) for _ in range(model.config.num_hidden_layers)])
    return sdpa_hf.FP8Cache(model.config, batch, capacity, device=device)


def cache_bytes(cache):
    if isinstance(cache, sdpa_hf.FP8Cache):
        return cache.memory_bytes()
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def fill(cache, model, batch, context, device):
    """Puts `context` rows of random K/V (the same for every cache: seeded per layer) into each layer."""
    config = model.config
    for layer in range(config.num_hidden_layers):
        gen = torch.Generator(device).manual_seed(layer)
        shape = (batch, config.num_key_value_heads, context, config.head_dim)
        keys, values = (torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16) for _ in range(2))
        cache.update(keys, values, layer)


def time_ms(run, prepare, warmup, repeats, device):
    """Median milliseconds of run(prepare()) over `repeats` calls after `warmup`; prepare() is not timed."""
    samples = []
    for i in range(warmup + repeats):
        arg = prepare()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run(arg)
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            start = time.perf_counter()
            run(arg)
            elapsed = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            samples.append(elapsed)
    return statistics.median(samples)


def graph_ms(step, warmup, repeats):
    """Median milliseconds of one replay of a CUDA graph of step(None), after `warmup` replays; None (and the error
    printed) where the step cannot be captured."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # the warm-up step torch asks for before capture
            step(None)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step(None)
    except RuntimeError as error:
        print(f"not captured: {error}", flush=True)
        return None
    return time_ms(lambda _: graph.replay(), lambda: None, warmup, repeats, "cuda")


def busy_us(intervals):
    """Length of the union of (start, end) intervals: GPU time during which some kernel ran. Summing kernel
    durations instead counts twice what overlaps, and a kernel launched early under programmatic dependent launch
    (decode's combine) spends most of its duration waiting on the kernel before it."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def kernel_ms(step, repeats):
    """GPU busy time of one eager step (profiler, mean over `repeats`): its kernels without the gaps that Python and
    launches leave between them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(repeats):
            step(None)
        torch.cuda.synchronize()
    kernels = [(e.time_range.start, e.time_range.end) for e in profile.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    return busy_us(kernels) / 1e3 / repeats


# Torch SDPA with sdpa_ext's mask function: a decode step gets no mask also while a CUDA graph is captured, where
# transformers' own sdpa mask materializes one (is_tracing) and keeps torch SDPA off its flash and cuDNN kernels.
PREFIX_ATTENTION = "sdpa_prefix_cache"
AttentionInterface.register(PREFIX_ATTENTION, sdpa_attention_forward)
AttentionMaskInterface.register(PREFIX_ATTENTION, sdpa_hf.causal_mask)


@contextmanager
def running(model, implementation, eager=True):
    """Sets the model's attention for `implementation`. Eager, the prefix baseline also leaves cuDNN out of torch
    SDPA's choice: cuDNN builds a new plan for every key length, and a decode step grows the keys by one, which cost
    38 ms a step on an H100 where flash's split-KV kernel took 2.8 ms (torch 2.11, B=16, 4k context, 2 layers)."""
    names = {"static": "sdpa", "prefix": PREFIX_ATTENTION, "sdpa_ext": sdpa_hf.register()}
    model.set_attn_implementation(names[implementation])
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(backends) if implementation == "prefix" and eager else nullcontext():
        yield


def tokens(model, batch, length, device):
    return torch.randint(0, model.config.vocab_size, (batch, length), device=device)


def free(device):
    if device == "cuda":
        torch.cuda.empty_cache()


@torch.no_grad()
def prefill_row(model, implementation, args, device):
    prompt = tokens(model, args.prefill_batch, args.prefill_len, device)
    new_cache = lambda: make_cache(implementation, model, args.prefill_batch, args.prefill_len, device)  # noqa: E731
    forward = lambda cache: model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)  # noqa: E731
    with running(model, implementation):
        ms = time_ms(forward, new_cache, 1, 5, device)
    free(device)
    return {"implementation": implementation, "batch": args.prefill_batch, "length": args.prefill_len, "ms": ms}


@torch.no_grad()
def decode_row(model, implementation, batch, context, args, device):
    # Rows for the timed steps, then (CUDA) for the profiled ones and the graph's replays.
    cache = make_cache(implementation, model, batch, context + 2 * args.warmup + 3 * args.steps + 1, device)
    fill(cache, model, batch, context, device)
    token = tokens(model, batch, 1, device)
    step = lambda _: model(token, past_key_values=cache, use_cache=True, logits_to_keep=1)  # noqa: E731
    with running(model, implementation):
        ms = time_ms(step, lambda: None, args.warmup, args.steps, device)
        gpu_ms = kernel_ms(step, args.steps) if device == "cuda" else None
    with running(model, implementation, eager=False):
        replay_ms = graph_ms(step, args.warmup, args.steps) if device == "cuda" else None
    row = {"implementation": implementation, "batch": batch, "context": context, "step_ms": ms,
           "kernel_step_ms": gpu_ms, "graph_step_ms": replay_ms, "tokens_per_s": batch * 1e3 / ms,
           "kv_cache_bytes": cache_bytes(cache)}
    del cache
    free(device)
    return row


@torch.no_grad()
def compare_row(model, args, device):
    prompt = tokens(model, 1, args.compare_prompt, device)
    cache = sdpa_hf.FP8Cache(model.config, 1, args.compare_prompt + args.compare_tokens, device=device)
    with running(model, "sdpa_ext"), sdpa_hf.compare_with_sdpa() as stats:
        model.generate(prompt, attention_mask=torch.ones_like(prompt), past_key_values=cache,
                       max_new_tokens=args.compare_tokens, do_sample=False)
    return {"prompt": args.compare_prompt, "new_tokens": args.compare_tokens,
            "worst_prefill": stats.worst("fp8_cache_prefill"), "worst_decode": stats.worst("fp8_cache"),
            "fallbacks": sdpa_hf.fallback_counts()}


def table_row(label, values, digits):
    """values by implementation; sdpa_ext's ratio to each SDPA column closes the row."""
    ours = values["sdpa_ext"]
    cells = [f"{values[i]:.{digits}f}" if values[i] is not None else "-" for i in IMPLEMENTATIONS]
    ratios = [f"{ours / values[i]:.2f}x" if values[i] is not None else "-" for i in IMPLEMENTATIONS[:-1]]
    return f"| {label} | {' | '.join(cells + ratios)} |"


def markdown(result):
    env, args = result["environment"], result["args"]
    prefill = {r["implementation"]: r for r in result["prefill"]}
    lines = [
        f"Llama architecture, RANDOM weights: {args['layers']} layers, hidden {args['hidden']}, intermediate "
        f"{args['intermediate']}, {args['heads']} heads / {args['kv_heads']} KV heads, head dim {args['head_dim']}, "
        f"vocab {args['vocab']}, bf16.",
        f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, transformers {env['transformers']}, "
        f"commit {env['commit']}.",
        "",
        f"| measurement | {' | '.join(LABELS[i] for i in IMPLEMENTATIONS)} | "
        f"{' | '.join('sdpa_ext / ' + LABELS[i] for i in IMPLEMENTATIONS[:-1])} |",
        "|---" * (2 * len(IMPLEMENTATIONS)) + "|",
        table_row(f"prefill B={args['prefill_batch']} S={args['prefill_len']}, ms",
                  {i: r["ms"] for i, r in prefill.items()}, 1),
    ]
    for batch in args["batches"]:
        for context in args["contexts"]:
            rows = {r["implementation"]: r for r in result["decode"] if (r["batch"], r["context"]) == (batch, context)}
            where = f"B={batch} context={context}"
            lines += [table_row(f"decode {where}, ms/step", {i: r["step_ms"] for i, r in rows.items()}, 2),
                      table_row(f"decode {where}, tokens/s", {i: r["tokens_per_s"] for i, r in rows.items()}, 0)]
            if rows["sdpa_ext"]["graph_step_ms"] is not None:
                lines.append(table_row(f"decode {where}, CUDA graph ms/step",
                                       {i: r["graph_step_ms"] for i, r in rows.items()}, 2))
            if rows["sdpa_ext"]["kernel_step_ms"] is not None:
                lines.append(table_row(f"decode {where}, GPU busy ms/step",
                                       {i: r["kernel_step_ms"] for i, r in rows.items()}, 2))
            memory = {i: r["kv_cache_bytes"] / 2**20 for i, r in rows.items()}
            lines.append(table_row(f"KV cache {where}, MiB", memory, 1))
    cmp = result["comparison"]
    lines += ["", f"Worst per-call attention cosine against torch SDPA in fp32 on the unquantized inputs (generate, "
                  f"B=1, {cmp['prompt']}-token prompt, {cmp['new_tokens']} new tokens): prefill (FP8 cache) "
                  f"{cmp['worst_prefill']:.5f}, decode (FP8 cache) {cmp['worst_decode']:.5f}; fallbacks: "
                  f"{cmp['fallbacks'] or 'none'}.",
              f"sdpa_ext calls that fell back to torch SDPA in the timed runs: {result['timed_fallbacks'] or 'none'}."]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    device = pick_device(args.smoke)
    sdpa_hf.reset_counters()
    env = {**environment(device), "transformers": transformers.__version__}
    model = build_model(args, device)
    print(f"{env['device']}: Llama architecture with random weights, {args.layers} layers", flush=True)
    result = {"environment": env, "command": " ".join(sys.argv), "args": vars(args) | {"out": str(args.out)},
              "prefill": [prefill_row(model, impl, args, device) for impl in IMPLEMENTATIONS],
              "decode": [decode_row(model, impl, batch, context, args, device) for batch in args.batches
                         for context in args.contexts for impl in IMPLEMENTATIONS],
              "timed_fallbacks": sdpa_hf.fallback_counts()}  # sdpa_ext calls that ran torch SDPA instead
    sdpa_hf.reset_counters()
    result["comparison"] = compare_row(model, args, device)
    report(result, markdown(result), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
