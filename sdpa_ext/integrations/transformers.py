"""sdpa_ext inside Hugging Face transformers (5.17): an attention implementation and a KV cache held in FP8.

    from sdpa_ext.integrations import transformers as sdpa_hf

    name = sdpa_hf.register()                                        # "sdpa_ext"
    model = AutoModelForCausalLM.from_config(config, attn_implementation=name)  # or model.set_attn_implementation(name)
    cache = sdpa_hf.FP8Cache(model.config, batch_size=1, max_cache_len=4096, device="cuda")
    tokens = model.generate(input_ids, past_key_values=cache, max_new_tokens=64)

Calls whose mask transformers leaves out (plain causal, no padding: transformers' own sdpa mask decides), and
causal queries after cached keys with no padding (decode steps, chunked prefill, speculative decoding: `causal_mask`
hands None or torch's causal_lower_right instead of a tensor, also while a CUDA graph is captured), run sdpa_ext:
the fp16/bf16 drop-in on ordinary key/value tensors, fp8_forward straight on the codes of an FP8Cache (its prefill
included). Decode steps with an FP8Cache can be captured in a CUDA graph and replayed as the cache grows. Anything
the kernels cannot express (a materialized mask such as padding, dropout, other head dims, fp32, autograd) runs
transformers' torch SDPA path instead: counted (`fallback_counts()`), warned once per reason, never wrong.
`compare_with_sdpa()` measures every call against torch SDPA in fp32 on the unquantized inputs.
"""

import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias, CausalVariant, causal_lower_right
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.cache_utils import Cache, CacheLayerMixin, get_layer_types_and_kwargs
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask
from transformers.utils.import_utils import is_cuda_stream_capturing

from sdpa_ext import ops
from sdpa_ext.attention import (KERNEL_HEAD_DIMS, SUPPORTED_DTYPES, kernel_quantizes_query,
                                 scaled_dot_product_attention)
from sdpa_ext.kv_cache import FP8KVCache
from sdpa_ext.quant import dequantize_fp8

DEFAULT_NAME = "sdpa_ext"

PATHS = {
    "drop_in": "the fp16/bf16 drop-in on ordinary key/value tensors",
    "fp8_cache_prefill": "fp8_forward on the codes of an FP8Cache's first write (q quantized per call)",
    "fp8_cache": "fp8_forward on the codes of an FP8Cache after its first write",
    "fallback": "transformers' torch SDPA path",
}

FALLBACK_REASONS = {
    "attention_mask": "a materialized attention mask (padding, sliding windows, packed sequences)",
    "dropout": "dropout > 0",
    "position_bias": "an additive position bias",
    "head_dim": f"a head dim other than {', '.join(map(str, KERNEL_HEAD_DIMS))}",
    "dtype": f"a query dtype other than {' or '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}",
    "requires_grad": "inputs that require grad (sdpa_ext has no backward)",
}

# The key view an FP8CacheLayer returns carries the layer under this attribute, and on its prefill the rows as they
# came in under the second (see FP8CacheLayer.update).
LAYER_ATTRIBUTE = "_sdpa_ext_fp8_layer"
PREFILL_ROWS_ATTRIBUTE = "_sdpa_ext_prefill_rows"

# Attention arguments that neither the kernels nor torch SDPA apply (transformers' sdpa path drops them silently).
UNSUPPORTED_KWARGS = {"softcap": "attention logit soft-capping (Gemma 2)", "s_aux": "attention sinks (gpt-oss)"}


class FallbackWarning(UserWarning):
    """A call ran torch SDPA instead of sdpa_ext (warned once per reason until reset_counters())."""


_calls: Counter = Counter()      # attention calls by path (PATHS)
_fallbacks: Counter = Counter()  # fallback calls by reason (FALLBACK_REASONS)
_warned = set()                  # reasons warned about since the last reset_counters()


@dataclass
class ComparisonStats:
    """Cosine similarity of each attention call's output with torch SDPA in fp32 on the unquantized inputs, by the
    path the call took (a key of PATHS; see call_counts)."""

    cosines: Dict[str, List[float]] = field(default_factory=dict)

    def worst(self, path: Optional[str] = None) -> Optional[float]:
        """The lowest cosine of `path` (of every path when None); None when no such call ran."""
        paths = self.cosines.values() if path is None else [self.cosines.get(path, [])]
        return min((c for p in paths for c in p), default=None)

    def record(self, path: str, out: torch.Tensor, reference: torch.Tensor) -> None:
        cosine = F.cosine_similarity(out.double().flatten(), reference.double().flatten(), dim=0).item()
        self.cosines.setdefault(path, []).append(cosine)


_comparison: Optional[ComparisonStats] = None


@contextmanager
def compare_with_sdpa():
    """Measurement mode: every attention call inside the block is also computed by torch SDPA in fp32 on the
    unquantized inputs, and the cosine of the two outputs recorded in the yielded ComparisonStats. An FP8Cache keeps a
    copy of its unquantized keys and values while the mode is on, so enter it before the cache's first (prefill)
    call. Off (no cost beyond one check per call) outside the block."""
    global _comparison
    if _comparison is not None:
        raise RuntimeError("compare_with_sdpa() is already active; it does not nest")
    _comparison = stats = ComparisonStats()
    try:
        yield stats
    finally:
        _comparison = None


def call_counts() -> Dict[str, int]:
    """Attention calls since the last reset_counters(), by path (a key of PATHS)."""
    return dict(_calls)


def fallback_counts() -> Dict[str, int]:
    """Calls that ran torch SDPA since the last reset_counters(), by reason (a key of FALLBACK_REASONS)."""
    return dict(_fallbacks)


def reset_counters() -> None:
    """Zeroes the counts and re-arms the once-per-reason fallback warnings."""
    _calls.clear()
    _fallbacks.clear()
    _warned.clear()


def register(name: str = DEFAULT_NAME) -> str:
    """Registers the attention function and transformers' own sdpa mask under `name` (idempotent); returns `name`,
    for from_config/from_pretrained(attn_implementation=name) or model.set_attn_implementation(name)."""
    # transformers checks that a model supports SDPA (_sdpa_can_dispatch) for implementation names containing
    # "sdpa": the fallback path is transformers' SDPA, so only those models may use this one.
    if not isinstance(name, str) or "sdpa" not in name:
        raise ValueError(f"name must be a str containing 'sdpa' (so that transformers checks the model supports SDPA), "
                         f"got {name!r}")
    interface = AttentionInterface()
    if name in interface and interface[name] is not attention_forward:
        raise ValueError(f"name {name!r} is already registered for another attention implementation")
    AttentionInterface.register(name, attention_forward)
    # transformers' sdpa mask is None exactly when the call is plain causal (or, for one query, unmasked) with no
    # padding; causal_mask also leaves a chunk after cached keys unmaterialized. The kernels run both; every other
    # mask is materialized, and the attention function falls back on it.
    AttentionMaskInterface.register(name, causal_mask)
    return name


def causal_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                mask_function=causal_mask_function, attention_mask: Optional[torch.Tensor] = None,
                local_size: Optional[int] = None, allow_is_causal_skip: bool = True, **kwargs):
    """transformers' sdpa mask, except for causal queries that follow cached keys (the last q_length of kv_length
    positions) with no padding: None for one query (it sees every key), else torch's causal_lower_right(q_length,
    kv_length), which the kernels apply without a mask tensor. sdpa_mask would materialize both while a CUDA graph
    is being captured (transformers' is_tracing), and every captured decode step would fall back."""
    after_cache = (allow_is_causal_skip and mask_function is causal_mask_function and local_size is None
                   and kv_offset == 0 and q_length < kv_length and q_offset + q_length == kv_length)
    if after_cache:
        padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        # Checking a padding mask syncs (once per forward, as sdpa_mask's own check), which a capture cannot do.
        no_padding = padding is None or (not is_cuda_stream_capturing()
                                         and bool(padding[:, :kv_length].all()))
        if no_padding:
            return None if q_length == 1 else causal_lower_right(q_length, kv_length)
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask, local_size,
                     allow_is_causal_skip=allow_is_causal_skip, **kwargs)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs):
    """transformers' attention interface: query [B, Hq, Sq, D], key and value [B, Hkv, Sk, D] (or an FP8Cache's codes)
    -> (output [B, Sq, Hq, D] contiguous, None)."""
    for argument, what in UNSUPPORTED_KWARGS.items():
        if kwargs.get(argument) is not None:
            raise NotImplementedError(f"{argument}: {what} is not supported by sdpa_ext (nor applied by torch SDPA); "
                                      "use attn_implementation='eager' for this model")
    layer = _fp8_layer_of(key)
    prefill_rows = getattr(key, PREFILL_ROWS_ATTRIBUTE, None)
    # An FP8Cache's decode views span its whole capacity while a CUDA graph is captured (FP8CacheLayer.update).
    kv_len = key.size(2) if layer is None else layer.kv.rows_written
    chunk_mask = attention_mask if _is_chunk_mask(attention_mask, query.size(2), kv_len) else None
    reason = _fallback_reason(query, key, value, None if chunk_mask is not None else attention_mask, dropout, kwargs)
    if reason is None:
        path = "drop_in" if layer is None else "fp8_cache_prefill" if prefill_rows is not None else "fp8_cache"
        out = _fast_attention(module, query, key, value, layer, scaling, is_causal, chunk_mask)
    else:
        path = "fallback"
        _warn_fallback(reason)
        if prefill_rows is not None:  # the prompt's own rows: exactly what transformers' sdpa would get
            key, value = prefill_rows
        elif layer is not None:
            key, value = layer.dequantize(key[:, :, :kv_len], value[:, :, :kv_len], query.dtype)
        out, _ = sdpa_attention_forward(module, query, key, value, _mask_tensor(attention_mask, query), dropout,
                                        scaling, is_causal, **kwargs)
    _calls[path] += 1
    if _comparison is not None:
        _comparison.record(path, out, _reference(module, query, key, value, layer, attention_mask, scaling,
                                                 is_causal, kwargs))
    return out, None


def _is_chunk_mask(attention_mask, q_len, kv_len):
    """Whether the mask is causal_mask's causal_lower_right for exactly these query and key counts."""
    return (isinstance(attention_mask, CausalBias) and attention_mask.variant == CausalVariant.LOWER_RIGHT
            and (attention_mask.seq_len_q, attention_mask.seq_len_kv) == (q_len, kv_len))


def _mask_tensor(attention_mask, query):
    """The mask as transformers' sdpa path takes it: a CausalBias becomes its boolean [1, 1, Sq, Sk] tensor."""
    if not isinstance(attention_mask, CausalBias):
        return attention_mask
    q_len, kv_len = attention_mask.seq_len_q, attention_mask.seq_len_kv
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)[None, None]


def _fp8_layer_of(key):
    if key.dtype != torch.float8_e4m3fn:
        return None
    layer = getattr(key, LAYER_ATTRIBUTE, None)
    if layer is None:
        raise ValueError("key holds float8_e4m3fn codes that no FP8CacheLayer marked, so their scales are unknown: "
                         "pass the key view that FP8Cache.update returns, unchanged")
    return layer


def _fallback_reason(query, key, value, attention_mask, dropout, kwargs):
    if attention_mask is not None:
        return "attention_mask"
    if dropout > 0.0:
        return "dropout"
    if kwargs.get("position_bias") is not None:
        return "position_bias"
    if query.size(-1) not in KERNEL_HEAD_DIMS or key.size(-1) != query.size(-1) or value.size(-1) != query.size(-1):
        return "head_dim"
    if query.dtype not in SUPPORTED_DTYPES:
        return "dtype"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return "requires_grad"
    return None


def _warn_fallback(reason):
    _fallbacks[reason] += 1
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"sdpa_ext: {FALLBACK_REASONS[reason]} runs torch SDPA instead of sdpa_ext (this warning shows "
                      "once per reason; fallback_counts() counts every call)", FallbackWarning, stacklevel=3)


def _fast_attention(module, query, key, value, layer, scaling, is_causal, chunk_mask):
    """chunk_mask: causal_mask's causal_lower_right for these queries and keys, or None."""
    q_len, kv_len = query.size(2), key.size(2)
    chunk = chunk_mask is not None
    causal = chunk or q_len > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    if causal and kv_len > q_len and not chunk:
        # A missing mask means torch's top-left is_causal to transformers (sdpa_attention_forward). sdpa_mask leaves
        # it out with kv_len > q_len only for a prefill into an empty StaticCache, whose keys past q_len are unwritten
        # slots that top-left masks anyway: drop them, as sdpa_attention_forward does. Queries after cached keys come
        # with causal_mask's CausalBias (chunk), so after this every other causal call has q_len == kv_len, where
        # top-left and bottom-right alignments agree.
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    if layer is None:
        out = scaled_dot_product_attention(query, key, value, attn_mask=chunk_mask, is_causal=causal and not chunk,
                                           scale=scaling, enable_gqa=True)
    else:
        # Views that span the capacity (captured decode steps) end at each sequence's length on the device. Without
        # lengths a prefill's q is quantized per 16 rows by the kernel, as the drop-in's (only decode takes lengths).
        lengths = layer.kv.lengths if key.size(2) != layer.kv.rows_written else None
        by_rows = lengths is None and kernel_quantizes_query(query, query.size(-1), "auto", smooth_keys=False)
        # Written straight into the [B, Sq, Hq, D] output that transformers wants.
        out = query.new_empty((query.size(0), q_len, query.size(1), key.size(3)))
        lse = query.new_empty(query.shape[:3], dtype=torch.float32)
        ops.fp8_forward_into(query, key, value, None, layer.kv.k_scale, layer.kv.v_scale, out.transpose(1, 2), lse,
                             is_causal=causal, scale=scaling, seqlens_k=lengths, causal_alignment="bottom_right",
                             q_quantization="per_16_rows" if by_rows else "per_head")
        return out
    return out.transpose(1, 2).contiguous()  # a view where q's memory is [B, Sq, Hq, D] (empty_in_query_layout)


def _reference(module, query, key, value, layer, attention_mask, scaling, is_causal, kwargs):
    if layer is not None:
        key, value = layer.unquantized_for(key)
    with torch.no_grad():
        out, _ = sdpa_attention_forward(module, query.float(), key.float(), value.float(),
                                        _mask_tensor(attention_mask, query), 0.0, scaling, is_causal, **kwargs)
    return out


class FP8CacheLayer(CacheLayerMixin):
    """One layer of an FP8Cache: its keys and values as E4M3 codes in an FP8KVCache [B, Hkv, capacity, D]."""

    is_sliding = False

    def __init__(self, batch_size: int, max_cache_len: int, heads_kv: int, head_dim: int, device=None,
                 smooth_keys: bool = True):
        super().__init__()
        self.batch_size = batch_size
        self.kv = FP8KVCache(batch_size, heads_kv, max_cache_len, head_dim, device=device, smooth_keys=smooth_keys)
        self.unquantized = None  # (keys, values) as they came in, kept only under compare_with_sdpa()
        # The buffers exist from the start, so Cache.early_initialization has nothing to do for this layer.
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to allocate lazily: __init__ allocates the buffers (CacheLayerMixin requires the method)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Stores the new rows (the first call fixes the scales: FP8KVCache.prefill) and returns what attention runs
        on: views of the codes [B, Hkv, length, D]."""
        prefill = not self.kv.scales_fixed
        self.kv.update(key_states, value_states)
        self._keep_unquantized(key_states, value_states, prefill)
        # Attention runs on the codes, the prefill's too: the cache has just encoded its rows, so the prompt's
        # attention quantizes only q. The drop-in on the prompt's own rows quantized K and V a second time: a third
        # of its 1.0 ms of quantize_fp8_qkv in a prefill of Llama-8B-sized layers (8, B=4, S=2048, H100), which then
        # took 4.9 ms of GPU time more than torch SDPA; with this and the cache's one-read statistics (FP8KVCache.
        # prefill), 61.8-62.0 ms against 61.7-62.1 for SDPA with transformers' StaticCache.
        # A CUDA graph replays a captured step as the lengths grow on the device, so there the views span the
        # capacity and the kernel reads each sequence's length (attention_forward); eager views end at the rows
        # written, so that the kernel's plan spreads only those keys over the GPU.
        rows = self.kv.capacity if is_cuda_stream_capturing() and not prefill else self.kv.rows_written
        keys, values = self.kv.k_codes[:, :, :rows], self.kv.v_codes[:, :, :rows]
        # transformers hands the attention function only (query, key, value, mask), so the key view carries its
        # layer (hence the scales) as a Python attribute. The view is new on every call, so the mark is never stale;
        # a model that transforms keys between cache and attention drops it, and the attention function then refuses
        # the unmarked codes instead of guessing their scales. A prefill's view also carries the rows as they came:
        # a padded prompt falls back to transformers' sdpa on exactly those, so its logits equal transformers' own.
        setattr(keys, LAYER_ATTRIBUTE, self)
        if prefill:
            setattr(keys, PREFILL_ROWS_ATTRIBUTE, (key_states, value_states))
        return keys, values

    def _keep_unquantized(self, key_states, value_states, prefill):
        if _comparison is None:
            self.unquantized = None
        elif prefill:
            self.unquantized = (key_states, value_states)
        elif self.unquantized is not None:
            self.unquantized = tuple(torch.cat([old, new], dim=2)
                                     for old, new in zip(self.unquantized, (key_states, value_states)))

    def unquantized_for(self, keys: torch.Tensor):
        """The unquantized (keys, values) behind a codes view of this layer, for compare_with_sdpa()."""
        if self.unquantized is None or self.unquantized[0].size(2) != keys.size(2):
            raise RuntimeError("compare_with_sdpa() needs the FP8Cache's unquantized keys and values, which it keeps "
                               "only while the mode is on: enter compare_with_sdpa() before the cache's prefill")
        return self.unquantized

    def dequantize(self, keys: torch.Tensor, values: torch.Tensor, dtype: torch.dtype):
        """The values a codes view stands for. Keys come back minus the smoothing shift: every score of a row moves
        by the same q.m, so softmax, and with it attention under any mask, is unchanged."""
        return dequantize_fp8(keys, self.kv.k_scale, dtype), dequantize_fp8(values, self.kv.v_scale, dtype)

    def get_mask_sizes(self, query_length: int):
        return self.kv.rows_written + query_length, 0

    def get_seq_length(self) -> int:
        return self.kv.rows_written

    def get_max_length(self) -> int:
        return self.kv.capacity

    def reset(self) -> None:
        """Empties the layer for a new batch of prompts (keeping its buffers); the next update is a prefill that fixes
        new scales."""
        self.kv.reset()
        self.unquantized = None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("FP8Cache does not support beam search (reorder_cache); use greedy or sampling")


class FP8Cache(Cache):
    """A transformers Cache whose layers hold keys and values as E4M3 codes (sdpa_ext.FP8KVCache, one per layer),
    preallocated for `batch_size` sequences of up to `max_cache_len` tokens. Heads, head dim and layer count come from
    the (text) config, as for transformers' StaticCache. Use it with an attention implementation from register()."""

    def __init__(self, config, batch_size: int, max_cache_len: int, device=None, smooth_keys: bool = True):
        for name, value in (("batch_size", batch_size), ("max_cache_len", max_cache_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        text_config = config.get_text_config(decoder=True)
        layer_types, _ = get_layer_types_and_kwargs(text_config)
        other_types = sorted(set(layer_types) - {"full_attention"})
        if other_types:
            raise ValueError(f"config has {other_types} layers: FP8Cache holds full-attention layers only")
        heads_kv = getattr(text_config, "num_key_value_heads", None) or text_config.num_attention_heads
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
        super().__init__(layers=[FP8CacheLayer(batch_size, max_cache_len, heads_kv, head_dim, device, smooth_keys)
                                 for _ in layer_types])

    def memory_bytes(self) -> int:
        """Bytes the cache holds on its device (codes, scales, key shifts, lengths), over all layers."""
        return sum(layer.kv.memory_bytes() for layer in self.layers)
