"""The FP8 KV cache: kv_cache_append encodes exactly as torch does into preallocated buffers, and FP8KVCache decodes
from them as exact math on the stored values (smoothed keys included) would."""

import math

import pytest
import torch

import sdpa_ext
from reference import attention_float64, sdpa_float32, sqnr_db
from test_attention import FULL
from test_decode import check_rows


def expected_codes(x, scale, shift=None):
    """torch's own E4M3 cast of (x - shift) / scale in fp32, as raw bytes."""
    x = x.float().cpu()
    if shift is not None:
        x = x - shift.cpu()[:, :, None, :]
    return (x / scale.cpu()[:, :, None, None]).to(torch.float8_e4m3fn).view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_append_encodes_like_torch_at_each_start(device, dtype, layout):
    b, h, capacity, d, rows = 3, 4, 40, 128, 5
    gen = torch.Generator().manual_seed(0)
    k, v = (torch.randn(b, h, rows, d, generator=gen).to(dtype).to(device) for _ in range(2))
    shift = torch.randn(b, h, d, generator=gen).to(device)
    # Scales from 1 to 2 times each head's amax / 448: the codes span E4M3's range without saturating (torch 2.11's
    # cast gives NaN past 464 where the op saturates; test_append_saturates_never_nan covers that).
    spread = [1 + torch.rand(b, h, generator=gen).to(device) for _ in range(2)]
    k_scale, v_scale = ((x.float() - sub).abs().amax(dim=(2, 3)) / 448 * factor
                        for x, sub, factor in ((k, shift[:, :, None, :], spread[0]), (v, 0.0, spread[1])))
    start = torch.tensor([0, 17, capacity - 2], dtype=torch.int32, device=device)  # the last one runs past the end
    if layout == "bshd":  # a [B, S, H, D] buffer seen as [B, H, S, D]
        caches = [torch.full((b, capacity, h, d), 0x11, dtype=torch.uint8, device=device).transpose(1, 2)
                  for _ in range(2)]
    else:
        caches = [torch.full((b, h, capacity, d), 0x11, dtype=torch.uint8, device=device) for _ in range(2)]
    sdpa_ext.kv_cache_append(k, v, caches[0], caches[1], k_scale, v_scale, start, shift)
    for cache, x, scale, sub in ((caches[0], k, k_scale, shift), (caches[1], v, v_scale, None)):
        codes = expected_codes(x, scale, sub)
        cache = cache.cpu()
        for batch, first in enumerate(start.tolist()):
            kept = min(rows, capacity - first)
            assert torch.equal(cache[batch, :, first:first + kept], codes[batch, :, :kept])
            untouched = torch.cat([cache[batch, :, :first], cache[batch, :, first + kept:]], dim=1)
            assert bool((untouched == 0x11).all()), "rows outside [start, start + T) and the cache must stay"


def test_append_saturates_never_nan(device):
    x = torch.tensor([1e6, -1e6, 449.0, -463.0, float("inf"), 0.0], device=device).repeat(1, 1, 1, 16)[..., :64]
    scale = torch.ones(1, 1, device=device)
    caches = [torch.zeros(1, 1, 4, 64, dtype=torch.uint8, device=device) for _ in range(2)]
    start = torch.zeros(1, dtype=torch.int32, device=device)
    sdpa_ext.kv_cache_append(x, x, caches[0], caches[1], scale, scale, start)
    codes = caches[0][0, 0, 0, :6].cpu().tolist()
    assert codes == [0x7E, 0xFE, 0x7E, 0xFE, 0x7E, 0x00]  # +-448, never the NaN codes 0x7F / 0xFF


def make_cache_inputs(device, b=2, hq=16, hkv=4, prefill=300, appended=9, sq=1, d=128, offset_sd=0.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(b, hkv, prefill + appended, d, generator=gen)
    k = k + torch.randn(b, hkv, 1, d, generator=gen) * offset_sd
    v = torch.randn(b, hkv, prefill + appended, d, generator=gen)
    q = torch.randn(b, hq, sq, d, generator=gen)
    return [t.bfloat16().to(device) for t in (q, k, v)]


@pytest.mark.parametrize("smooth_keys", [True, False])
def test_cache_decodes_like_exact_math_on_its_values(device, smooth_keys, record_error):
    q, k, v = make_cache_inputs(device, sq=3)
    cache = sdpa_ext.FP8KVCache(2, 4, 512, 128, device=device, smooth_keys=smooth_keys)
    cache.prefill(k[:, :, :300], v[:, :, :300])
    for t in range(300, 309, 3):  # appended three rows at a time
        cache.append(k[:, :, t:t + 3], v[:, :, t:t + 3])
    assert cache.lengths.tolist() == [309, 309] and cache.rows_written == 309
    out, lse = cache.attend(q)
    # The values the cache stands for: codes * scale (+ the shift for keys).
    stored_k = sdpa_ext.dequantize_fp8(cache.k_codes[:, :, :309], cache.k_scale)
    if smooth_keys:
        stored_k = stored_k + cache.k_shift[:, :, None, :]
    stored_v = sdpa_ext.dequantize_fp8(cache.v_codes[:, :, :309], cache.v_scale)
    q_codes = sdpa_ext.dequantize_fp8(*sdpa_ext.quantize_fp8(q))
    ref_out, ref_lse = attention_float64(q_codes, stored_k, stored_v, True, None, "bottom_right")
    # lse is that of the stored (shifted) keys; lse_shift adds softmax_scale * q.m back.
    check_rows(out, lse + cache.lse_shift(q), ref_out, ref_lse, "cache")
    sdpa_out = sdpa_float32(q, k[:, :, :309], v[:, :, :309], True, None, "bottom_right")
    record_error("end_to_end-full", sqnr_db=sqnr_db(out, sdpa_out))
    assert sqnr_db(out, sdpa_out) >= 20.0


def test_smoothing_recovers_keys_with_channel_offsets(device):
    # Keys offset per channel (sd 5) crowd most values of a head into a few E4M3 codes under one scale; the cache
    # stores them minus the prefill's mean key. benchmarks/kv_cache_numerics.py measured (CPU, bf16, 4 queries,
    # 1024 keys): no offsets 26.0 dB smoothed / 26.2 not; offsets sd 5: 26.1 / 16.6.
    def end_to_end(offset_sd, smooth):
        q, k, v = make_cache_inputs(device, b=1, hq=8, hkv=2, prefill=512, appended=512, sq=4, d=64,
                                    offset_sd=offset_sd, seed=3)
        cache = sdpa_ext.FP8KVCache(1, 2, 1024, 64, device=device, smooth_keys=smooth)
        cache.prefill(k[:, :, :512], v[:, :, :512])
        cache.append(k[:, :, 512:], v[:, :, 512:])
        return sqnr_db(cache.attend(q)[0], sdpa_float32(q, k, v, True, None, "bottom_right"))

    plain = end_to_end(0.0, True)
    assert end_to_end(5.0, True) >= plain - 1.0, "smoothed keys with offsets within 1 dB of keys without"
    assert end_to_end(5.0, False) <= plain - 5.0, "the offsets do cost an unsmoothed cache (else the test is moot)"


def test_cache_with_ragged_prefill_and_graph_replay(device):
    # Sequences of different lengths in one cache: prefill marks the real rows, and decode steps append at each
    # sequence's own length; a CUDA graph of append + attend replays with the lengths advancing on the device.
    q, k, v = make_cache_inputs(device, b=3, prefill=64, appended=4, sq=1)
    lengths = torch.tensor([64, 10, 37], dtype=torch.int32, device=device)
    cache = sdpa_ext.FP8KVCache(3, 4, 128, 128, device=device)
    cache.prefill(k[:, :, :64], v[:, :, :64], lengths=lengths)
    new_k, new_v = torch.empty_like(k[:, :, :1]), torch.empty_like(v[:, :, :1])  # a decode loop's static inputs

    def step():
        cache.append(new_k, new_v)
        return cache.attend(q)[0]

    graph = None
    for t in range(64, 68):
        new_k.copy_(k[:, :, t:t + 1])
        new_v.copy_(v[:, :, t:t + 1])
        if graph is not None:
            graph.replay()
        elif device == "cuda" and t == 65:  # step 64 warmed up outside the capture; capture 65, replay 66 and 67
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step()
            graph.replay()
        else:
            out = step()
    assert cache.lengths.tolist() == [68, 14, 41]
    # Each sequence: its prefill rows, then the four appended rows right after them.
    for b, first in enumerate([64, 10, 37]):
        keys = torch.cat([k[b:b + 1, :, :first], k[b:b + 1, :, 64:68]], dim=2)
        values = torch.cat([v[b:b + 1, :, :first], v[b:b + 1, :, 64:68]], dim=2)
        reference = sdpa_float32(q[b:b + 1], keys, values)
        assert sqnr_db(out[b:b + 1], reference) >= 20.0, b


@pytest.mark.parametrize("smooth_keys", [True, False])
@pytest.mark.parametrize("ragged", [True, False])
def test_prefill_fixes_scales_from_the_real_rows(device, smooth_keys, ragged):
    # The definitions, in float64 over each sequence's real rows: shift = the mean key; scale = amax |k - shift|
    # (amax |v|) * margin / 448, 1 for a sequence with no rows. Keys carry channel offsets, so the shift matters.
    q, k, v = make_cache_inputs(device, b=3, hq=4, hkv=2, prefill=40, appended=0, d=64, offset_sd=5.0)
    lengths = torch.tensor([40, 0, 17] if ragged else [40] * 3, dtype=torch.int32, device=device)
    cache = sdpa_ext.FP8KVCache(3, 2, 64, 64, device=device, smooth_keys=smooth_keys, scale_margin=2.0)
    keys = k.transpose(1, 2).contiguous().transpose(1, 2)  # strided [B, S, H, D] storage, as models hand keys over
    cache.prefill(keys, v, lengths=lengths if ragged else None)
    for b, rows in enumerate(lengths.tolist()):
        kb, vb = k[b, :, :rows].double().cpu(), v[b, :, :rows].double().cpu()
        shift = kb.mean(dim=1) if smooth_keys and rows else torch.zeros(2, 64, dtype=torch.float64)
        for name, x, got in (("k", kb - shift[:, None], cache.k_scale[b]), ("v", vb, cache.v_scale[b])):
            amax = x.abs().amax(dim=(1, 2)) if rows else torch.zeros(2, dtype=torch.float64)
            expected = torch.where(amax > 0, amax * 2.0 / 448, torch.ones_like(amax))
            torch.testing.assert_close(got.double().cpu(), expected, rtol=1e-6, atol=0, msg=f"{name} {b}")
        if smooth_keys:
            torch.testing.assert_close(cache.k_shift[b].double().cpu(), shift, rtol=0, atol=1e-5)
    assert cache.lengths.tolist() == lengths.tolist()


def test_cache_refuses_misuse(device):
    cache = sdpa_ext.FP8KVCache(1, 2, 8, 64, device=device)
    x = torch.zeros(1, 2, 4, 64, dtype=torch.float16, device=device)
    with pytest.raises(RuntimeError, match="call prefill first"):
        cache.append(x, x)
    with pytest.raises(ValueError, match=r"k must have shape \[B, Hkv, T, D\] with \(B, Hkv, D\) = \(1, 2, 64\)"):
        cache.prefill(x[:, :1], x)
    cache.prefill(x, x)
    with pytest.raises(RuntimeError, match="prefill fixes the scales and runs once"):
        cache.prefill(x, x)
    with pytest.raises(ValueError, match="the cache holds 8 rows per sequence: 4 written, 5 more do not fit"):
        cache.append(torch.zeros(1, 2, 5, 64, dtype=torch.float16, device=device), x[:, :, :1].expand(1, 2, 5, 64))
    with pytest.raises(ValueError, match="scale_margin must be a finite number >= 1"):
        sdpa_ext.FP8KVCache(1, 2, 8, 64, scale_margin=0.5)
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        sdpa_ext.FP8KVCache(1, 2, 0, 64)
    assert cache.memory_bytes() == 2 * 2 * 8 * 64 + 2 * 2 * 4 + 2 * 64 * 4 + 4
    assert math.isclose(cache.k_scale.min().item(), 1.0)  # zero prefill: scale 1, as quantize_fp8 gives a zero head
