"""The transformers integration on a tiny random Llama: registration, logits against transformers' "sdpa",
generate with the FP8 cache, fallbacks, memory and the comparison mode.

Gates come from E4M3's precision. Per-head E4M3 inputs have an SQNR of about 26 dB (DESIGN.md section 5), and an
output with SQNR s has cosine ~ 1 - 10**(-s/10) / 2 with the exact one. One attention call carries the noise of q, k
and v: 26 - 10*log10(3) = 21 dB, cosine >= 0.996 (PER_CALL_COSINE). Logits carry that of both layers (18 dB) and
whatever the MLPs and norms amplify: we allow one dB more, 17 dB, cosine >= 0.99 (LOGITS_COSINE). Measured on
the CPU with the seeds below: per call >= 0.9994, forward logits 0.9989, decode steps >= 0.9988.

The model's initializer_range is 0.05 (transformers' default 0.02 leaves attention almost uniform, where a wrong
softmax scale would not show): a non-causal prefill then drops the logits cosine to 0.49.
"""

import math
import warnings
from contextlib import contextmanager

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the transformers integration needs transformers installed")

from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, StaticCache  # noqa: E402

from sdpa_ext.integrations import transformers as sdpa_hf  # noqa: E402


def cosine_floor(sqnr_db):
    return 1.0 - 10.0 ** (-sqnr_db / 10.0) / 2.0


FP8_INPUT_SQNR_DB = 26.0
PER_CALL_COSINE = cosine_floor(FP8_INPUT_SQNR_DB - 10 * math.log10(3))  # 0.9962
LOGITS_COSINE = 0.99  # cosine_floor(17.0) = 0.990
LAYERS = 2
BATCH, PROMPT, NEW_TOKENS = 2, 24, 8
NAME = sdpa_hf.register()


def tiny_config(head_dim=64):
    return LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=head_dim, num_hidden_layers=LAYERS, vocab_size=512, max_position_embeddings=256,
                       initializer_range=0.05, pad_token_id=0, eos_token_id=None)  # no EOS: generate runs every step


def build_model(device, head_dim=64):
    torch.manual_seed(0)
    built = AutoModelForCausalLM.from_config(tiny_config(head_dim), attn_implementation=NAME, dtype=torch.bfloat16)
    sdpa_hf.reset_counters()
    return built.to(device).eval()


@pytest.fixture
def model(device):
    return build_model(device)


def prompt(device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, 512, (BATCH, PROMPT), generator=gen).to(device)


def cosine(a, b):
    return torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


@contextmanager
def attention(model, implementation):
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(NAME)


def logits_with(model, implementation, input_ids, **kwargs):
    with attention(model, implementation), torch.no_grad():
        return model(input_ids, **kwargs).logits


def stepwise_logits(model, cache, sequences, prompt_len):
    """Logits at the prompt's end, then after each given token, through `cache` (teacher forcing): entry i predicts
    token prompt_len + i, as generate's i-th logits do."""
    with torch.no_grad():
        steps = [model(sequences[:, :prompt_len], past_key_values=cache, use_cache=True).logits[:, -1]]
        for t in range(prompt_len, sequences.size(1) - 1):
            steps.append(model(sequences[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1])
    return steps


def sdpa_steps(model, sequences, prompt_len):
    """stepwise_logits of transformers' "sdpa" with a DynamicCache: the reference for decoding."""
    with attention(model, "sdpa"):
        return stepwise_logits(model, DynamicCache(config=model.config), sequences, prompt_len)


def fp8_generate(model, input_ids, **kwargs):
    cache = sdpa_hf.FP8Cache(model.config, BATCH, PROMPT + NEW_TOKENS, device=input_ids.device)
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), past_key_values=cache,
                             max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, **kwargs)
    return out, cache


def test_register_is_idempotent_and_refuses_taken_names():
    assert sdpa_hf.register() == NAME == sdpa_hf.register(NAME)
    assert transformers.AttentionInterface._global_mapping[NAME] is sdpa_hf.attention_forward
    with pytest.raises(ValueError, match="already registered"):
        sdpa_hf.register("sdpa")
    with pytest.raises(ValueError, match="containing 'sdpa'"):
        sdpa_hf.register("fp8")


def test_set_attn_implementation_switches_both_ways(device):
    built = AutoModelForCausalLM.from_config(tiny_config(), attn_implementation="sdpa", dtype=torch.bfloat16)
    built = built.to(device).eval()
    for implementation, calls in ((NAME, {"drop_in": LAYERS}), ("sdpa", {})):
        built.set_attn_implementation(implementation)
        assert built.config._attn_implementation == implementation
        sdpa_hf.reset_counters()
        with torch.no_grad():
            built(prompt(device))
        assert sdpa_hf.call_counts() == calls


def test_forward_logits_match_sdpa(model, device):
    input_ids = prompt(device)
    ours = logits_with(model, NAME, input_ids)
    assert sdpa_hf.call_counts() == {"drop_in": LAYERS} and sdpa_hf.fallback_counts() == {}
    reference = logits_with(model, "sdpa", input_ids)
    assert cosine(ours, reference) > LOGITS_COSINE
    assert not torch.equal(ours, reference)  # the FP8 path really ran


def test_static_cache_prefill_matches_sdpa(model, device):
    # An empty StaticCache returns max_cache_len keys with no mask: transformers means top-left causal there (the
    # slots past the prompt are empty); a bottom-right mask would attend to them.
    input_ids = prompt(device)
    ours = logits_with(model, NAME, input_ids, past_key_values=StaticCache(model.config, PROMPT + 16))
    assert sdpa_hf.call_counts() == {"drop_in": LAYERS}
    reference = logits_with(model, "sdpa", input_ids, past_key_values=StaticCache(model.config, PROMPT + 16))
    assert cosine(ours, reference) > LOGITS_COSINE


@pytest.mark.parametrize("head_dim", [64, 256])
def test_generate_with_fp8_cache_follows_sdpa(device, head_dim):
    # head_dim 256 (Gemma-like heads): the prefill and decode kernels built for it, no fallback.
    model = build_model(device, head_dim)
    input_ids = prompt(device)
    out, cache = fp8_generate(model, input_ids)
    assert out.sequences.shape == (BATCH, PROMPT + NEW_TOKENS)
    assert torch.equal(out.sequences[:, :PROMPT], input_ids)
    # The prompt and every later token run fp8_forward on the cache's codes.
    assert sdpa_hf.call_counts() == {"fp8_cache_prefill": LAYERS, "fp8_cache": LAYERS * (NEW_TOKENS - 1)}
    assert sdpa_hf.fallback_counts() == {}
    assert cache.get_seq_length() == PROMPT + NEW_TOKENS - 1
    reference = sdpa_steps(model, out.sequences, PROMPT)
    assert len(out.logits) == len(reference) == NEW_TOKENS
    for step, (ours, theirs) in enumerate(zip(out.logits, reference)):
        assert cosine(ours, theirs) > LOGITS_COSINE, f"step {step}"


def test_manual_decode_loop_with_fp8_cache(model, device):
    sequences = torch.cat([prompt(device), prompt(device, seed=1)[:, :NEW_TOKENS]], dim=1)
    cache = sdpa_hf.FP8Cache(model.config, BATCH, sequences.size(1), device=device)
    ours = stepwise_logits(model, cache, sequences, PROMPT)
    assert cache.get_seq_length() == sequences.size(1) - 1
    assert sdpa_hf.call_counts()["fp8_cache"] == LAYERS * (NEW_TOKENS - 1)
    for step, (a, b) in enumerate(zip(ours, sdpa_steps(model, sequences, PROMPT))):
        assert cosine(a, b) > LOGITS_COSINE, f"step {step}"


CHUNK = 4  # queries after the cached prompt: a chunked prefill, or a speculative-decoding check


@pytest.mark.parametrize("kind", ["fp8_cache", "dynamic_cache"])
def test_chunk_after_cached_keys_runs_the_kernels(model, device, kind):
    # A chunk of queries after cached keys is causal, bottom-right aligned: causal_mask hands torch's
    # causal_lower_right instead of a materialized mask, and the kernels run it (no fallback).
    sequences = torch.cat([prompt(device), prompt(device, seed=1)[:, :CHUNK]], dim=1)
    if kind == "fp8_cache":
        cache = sdpa_hf.FP8Cache(model.config, BATCH, sequences.size(1), device=device)
    else:
        cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(sequences[:, :PROMPT], past_key_values=cache, use_cache=True)
        sdpa_hf.reset_counters()
        ours = model(sequences[:, PROMPT:], past_key_values=cache, use_cache=True).logits
    path = "fp8_cache" if kind == "fp8_cache" else "drop_in"
    assert sdpa_hf.call_counts() == {path: LAYERS} and sdpa_hf.fallback_counts() == {}
    with attention(model, "sdpa"), torch.no_grad():
        reference_cache = DynamicCache(config=model.config)
        model(sequences[:, :PROMPT], past_key_values=reference_cache, use_cache=True)
        reference = model(sequences[:, PROMPT:], past_key_values=reference_cache, use_cache=True).logits
    for t in range(CHUNK):
        assert cosine(ours[:, t], reference[:, t]) > LOGITS_COSINE, f"query {t}"


def test_causal_mask_leaves_out_only_what_the_kernels_apply():
    from torch.nn.attention.bias import CausalBias, CausalVariant
    from transformers.masking_utils import sdpa_mask

    chunk = sdpa_hf.causal_mask(2, 4, 10, q_offset=6)
    assert isinstance(chunk, CausalBias) and chunk.variant == CausalVariant.LOWER_RIGHT
    assert (chunk.seq_len_q, chunk.seq_len_kv) == (4, 10)
    assert sdpa_hf.causal_mask(2, 4, 10, q_offset=6, attention_mask=torch.ones(2, 10, dtype=torch.bool)) is not None
    padded = torch.ones(2, 10, dtype=torch.bool)
    padded[0, :3] = False
    for kwargs in ({"attention_mask": padded}, {"q_offset": 0}, {"allow_is_causal_skip": False}, {"local_size": 3}):
        args = {"q_offset": 6, **kwargs}
        expected = sdpa_mask(2, 4, 10, **args)
        got = sdpa_hf.causal_mask(2, 4, 10, **args)
        assert (got is None and expected is None) or torch.equal(got, expected), kwargs
    assert sdpa_hf.causal_mask(2, 5, 5) is None  # plain causal: transformers' own skip
    # One query after the cache sees every key: no mask, with or without an all-true padding mask.
    assert sdpa_hf.causal_mask(2, 1, 10, q_offset=9) is None
    assert sdpa_hf.causal_mask(2, 1, 10, q_offset=9, attention_mask=torch.ones(2, 10, dtype=torch.bool)) is None
    assert torch.equal(sdpa_hf.causal_mask(2, 1, 10, q_offset=9, attention_mask=padded),
                       sdpa_mask(2, 1, 10, q_offset=9, attention_mask=padded))


def test_decode_step_replays_from_a_cuda_graph(model, device):
    # A serving loop captures one decode step and replays it with new tokens and positions in its static inputs.
    # Captured, the cache's views span its capacity and the kernel reads each sequence's length from the device,
    # so every replay appends a row and attends to one key more than the replay before.
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    sequences = torch.cat([prompt(device), prompt(device, seed=1)[:, :NEW_TOKENS]], dim=1)
    eager = stepwise_logits(model, sdpa_hf.FP8Cache(model.config, BATCH, sequences.size(1), device=device),
                            sequences, PROMPT)
    cache = sdpa_hf.FP8Cache(model.config, BATCH, sequences.size(1), device=device)
    token, position = sequences[:, PROMPT:PROMPT + 1].clone(), torch.full((BATCH, 1), PROMPT, device=device)
    step = lambda: model(token, position_ids=position, past_key_values=cache, use_cache=True).logits[:, -1]  # noqa
    replayed = []
    with torch.no_grad():
        replayed.append(model(sequences[:, :PROMPT], past_key_values=cache, use_cache=True).logits[:, -1])
        replayed.append(step())  # the first decode step, eager: it also warms up what the capture records
        sdpa_hf.reset_counters()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        assert sdpa_hf.call_counts() == {"fp8_cache": LAYERS}  # captured on the codes, no fallback
        for t in range(PROMPT + 1, sequences.size(1) - 1):
            token.copy_(sequences[:, t:t + 1])
            position.fill_(t)
            graph.replay()
            replayed.append(logits.clone())
    assert sdpa_hf.call_counts() == {"fp8_cache": LAYERS}  # replays run no Python
    assert cache.layers[0].kv.lengths.tolist() == [sequences.size(1) - 1] * BATCH
    for step_index, (ours, theirs) in enumerate(zip(replayed, eager)):
        # Eager steps plan over the keys written, captured ones over the capacity: the same sums, split apart
        # differently, so the logits agree to fp32 rounding, far inside the FP8 noise.
        assert cosine(ours, theirs) > 0.9999, f"step {step_index}"


def test_fp8_cache_reset_starts_over(model, device):
    first, cache = fp8_generate(model, prompt(device))
    cache.reset()
    assert cache.get_seq_length() == 0
    with torch.no_grad():
        again = model.generate(prompt(device), attention_mask=torch.ones_like(first.sequences[:, :PROMPT]),
                               past_key_values=cache, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert torch.equal(again, first.sequences)


def test_fp8_cache_is_half_a_bf16_cache(model, device):
    capacity = 64
    input_ids = prompt(device)
    fp8 = sdpa_hf.FP8Cache(model.config, BATCH, capacity, device=device)
    bf16 = StaticCache(model.config, capacity)
    with torch.no_grad():
        model(input_ids, past_key_values=fp8, use_cache=True)
        model(input_ids, past_key_values=bf16, use_cache=True)
    bf16_bytes = sum(t.numel() * t.element_size() for layer in bf16.layers for t in (layer.keys, layer.values))
    # Codes are half of bf16; the per-(batch, head) key shift adds 4 bytes per D, 1/capacity of the bf16 cache.
    assert 0.5 < fp8.memory_bytes() / bf16_bytes < 0.5 + 1.5 / capacity


@pytest.mark.parametrize("case", ["padding", "float32", "requires_grad"])
def test_fallback_is_counted_warned_once_and_exact(device, case):
    torch.manual_seed(0)
    dtype = torch.float32 if case == "float32" else torch.bfloat16
    built = AutoModelForCausalLM.from_config(tiny_config(), attn_implementation=NAME, dtype=dtype).to(device).eval()
    input_ids = prompt(device)
    mask = torch.ones_like(input_ids)
    if case == "padding":
        mask[0, :5] = 0  # left padding of the first sequence
    reason = {"padding": "attention_mask", "float32": "dtype", "requires_grad": "requires_grad"}[case]
    sdpa_hf.reset_counters()

    def run(implementation):
        with attention(built, implementation), torch.set_grad_enabled(case == "requires_grad"):
            return built(input_ids, attention_mask=mask).logits.detach()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = run(NAME)
        run(NAME)
    assert sdpa_hf.fallback_counts() == {reason: 2 * LAYERS}
    assert sdpa_hf.call_counts() == {"fallback": 2 * LAYERS}
    assert len([w for w in caught if issubclass(w.category, sdpa_hf.FallbackWarning)]) == 1
    # The fallback is transformers' own sdpa path on the same tensors.
    assert torch.equal(ours, run("sdpa"))


def test_padded_generate_falls_back_on_the_dequantized_cache(model, device):
    input_ids = prompt(device)
    mask = torch.ones_like(input_ids)
    mask[0, :5] = 0
    cache = sdpa_hf.FP8Cache(model.config, BATCH, PROMPT + NEW_TOKENS, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sdpa_hf.FallbackWarning)
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=mask, past_key_values=cache, max_new_tokens=NEW_TOKENS,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True)
    assert sdpa_hf.fallback_counts() == {"attention_mask": LAYERS * NEW_TOKENS}
    full_mask = torch.cat([mask, torch.ones_like(out.sequences[:, PROMPT:])], dim=1)
    reference = logits_with(model, "sdpa", out.sequences, attention_mask=full_mask)
    for step, ours in enumerate(out.logits):
        assert cosine(ours, reference[:, PROMPT - 1 + step]) > LOGITS_COSINE, f"step {step}"


def test_compare_with_sdpa_reports_every_call(model, device):
    with sdpa_hf.compare_with_sdpa() as stats:
        fp8_generate(model, prompt(device))
        with pytest.raises(RuntimeError, match="nest"):
            with sdpa_hf.compare_with_sdpa():
                pass
    assert len(stats.cosines["fp8_cache_prefill"]) == LAYERS
    assert len(stats.cosines["fp8_cache"]) == LAYERS * (NEW_TOKENS - 1)
    assert PER_CALL_COSINE < stats.worst() <= stats.worst("fp8_cache") < 1.0
    fp8_generate(model, prompt(device))  # outside the block: nothing recorded
    assert sum(map(len, stats.cosines.values())) == LAYERS * NEW_TOKENS


def test_compare_mode_needs_the_prefill(model, device):
    cache = sdpa_hf.FP8Cache(model.config, BATCH, PROMPT + 2, device=device)
    input_ids = prompt(device)
    with torch.no_grad():
        model(input_ids, past_key_values=cache, use_cache=True)
        with sdpa_hf.compare_with_sdpa(), pytest.raises(RuntimeError, match="before the cache's prefill"):
            model(input_ids[:, :1], past_key_values=cache, use_cache=True)


def test_fp8_cache_errors(model, device):
    config = model.config
    with pytest.raises(ValueError, match="batch_size"):
        sdpa_hf.FP8Cache(config, 0, 16)
    with pytest.raises(ValueError, match="max_cache_len"):
        sdpa_hf.FP8Cache(config, 1, 16.0)
    sliding = tiny_config()
    sliding.sliding_window = 8
    with pytest.raises(ValueError, match="sliding_attention"):
        sdpa_hf.FP8Cache(sliding, 1, 16)
    cache = sdpa_hf.FP8Cache(config, BATCH, PROMPT, device=device)
    with torch.no_grad():
        model(prompt(device), past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="do not fit"):
            model(prompt(device)[:, :1], past_key_values=cache, use_cache=True)
    with pytest.raises(NotImplementedError, match="beam search"):
        cache.reorder_cache(torch.arange(BATCH))


def test_unmarked_fp8_keys_and_unsupported_arguments_are_refused(model, device):
    attention = model.model.layers[0].self_attn
    codes = torch.zeros(1, 2, 4, 64, dtype=torch.float8_e4m3fn, device=device)
    query = torch.zeros(1, 4, 1, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="no FP8CacheLayer marked"):
        sdpa_hf.attention_forward(attention, query, codes, codes, None)
    keys = torch.zeros(1, 2, 4, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(NotImplementedError, match="softcap"):
        sdpa_hf.attention_forward(attention, query, keys, keys, None, softcap=50.0)
