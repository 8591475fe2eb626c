"""The decode path (few query rows against many keys): fp8_forward with seqlens_k, bottom-right causal rows, and q
given as fp16/bf16/fp32 values, against the references of DESIGN.md section 5 on every device and every variant that
takes the case (`auto` routes up to 16 query rows and every seqlens_k call to `decode`)."""

import pytest
import torch

import sdpa_ext
from conftest import CUDA_SKIP
from reference import attention_float64, sdpa_float32
from test_attention import FULL, abs_errors, check_end_to_end_error, quantize_all, sqnr_db


def decode_variants(device):
    if device == "cpu":
        return ["auto"]
    decode = [name for name in sdpa_ext.variant_names(sdpa_ext.device_arch()) if name.startswith("decode")]
    return ["auto", "fast", *decode]


# (B, Hq, Hkv, Sq, Sk, D). Packed rows per kv head (Hq / Hkv * Sq) of 4 to 160: one 16-row warp, two and four warps
# (64-row tiles, by wgmma in decode_wgmma: full at 16 queries of 4 heads, 48 of 64 rows at 12), several row tiles
# with a head across two of them (MQA, Sq = 5); one key; B = 1 at 20000 keys, whose keys split across many blocks
# and a combine; B x Hkv = 96 heads, which need fewer splits. D = 256 (16-key tiles): one warp; 48 packed rows in two
# 32-row tiles (at most two warps a block there); MQA with 24 rows. B x Hkv = 320 and 160 one-warp heads: more
# than a GPU's blocks hold at once, so on sm_90 each block takes several heads in turn (a persistent grid). On sm_90
# these caches fit L2, where up to 64 packed rows at D = 64 and 128 take 16-row tiles instead of wider blocks.
CASES = [
    (2, 8, 2, 1, 1000, 64),
    (3, 32, 8, 1, 4097, 128),
    (1, 32, 8, 4, 3000, 128),
    (2, 16, 2, 16, 600, 128),
    (2, 32, 8, 16, 2000, 64),
    (1, 16, 4, 12, 1500, 128),
    (1, 32, 1, 5, 513, 64),
    (2, 4, 4, 7, 40, 64),
    (1, 8, 8, 1, 1, 128),
    (1, 2, 1, 1, 20000, 64),
    (4, 8, 8, 16, 16, 128),
    (2, 8, 4, 1, 3000, 256),
    (1, 16, 4, 12, 700, 256),
    (3, 8, 1, 3, 2000, 256),
    (40, 8, 8, 1, 300, 64),
    (20, 16, 8, 1, 700, 128),
]
MASKS = [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]


def case_id(case):
    return "x".join(map(str, case))


def make_inputs(case, seed, device, dtype=torch.float16):
    b, hq, hkv, sq, sk, d = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=gen)
    k = torch.randn(b, hkv, sk, d, generator=gen)
    v = torch.randn(b, hkv, sk, d, generator=gen)
    return [t.to(dtype).to(device) for t in (q, k, v)]


def seqlens_for(case, seed):
    """Per-sequence key counts that include 0, fewer than Sq (bottom-right rows that see nothing) and Sk."""
    b, _, _, sq, sk, _ = case
    gen = torch.Generator().manual_seed(100 + seed)
    lengths = torch.randint(0, sk + 1, (b,), generator=gen)
    lengths[0] = sk
    if b > 1:
        lengths[1] = min(sk, max(0, sq - 2))
    if b > 2:
        lengths[2] = 0
    return lengths.to(torch.int32)


def run_poisoned(q, k8, v8, qs, ks, vs, variant, **kwargs):
    b, hq, sq, d = q.shape
    out = torch.full((b, hq, sq, d), float("nan"), dtype=torch.float16, device=q.device)
    lse = torch.full((b, hq, sq), float("nan"), device=q.device)
    sdpa_ext.fp8_forward_into(q, k8, v8, qs, ks, vs, out, lse, variant=variant, **kwargs)
    return out, lse


def check_rows(out, lse, ref_out, ref_lse, variant):
    """Kernel error (full tier) against float64 on the dequantized inputs; rows that see no key are 0 with lse -inf."""
    seen = torch.isfinite(ref_lse)
    assert bool(torch.isfinite(out).all()), f"{variant}: NaN/Inf in out (unwritten or overflowed)"
    assert bool((lse[~seen] == float("-inf")).all()), f"{variant}: a row that sees no key must have lse -inf"
    assert bool((out[~seen] == 0).all()), f"{variant}: a row that sees no key must be 0"
    assert not bool(torch.isnan(lse).any()), f"{variant}: NaN in lse (unwritten)"
    if bool(seen.any()):
        sqnr = sqnr_db(out[seen], ref_out[seen])
        assert sqnr >= FULL.kernel_sqnr_db, f"{variant}: kernel SQNR {sqnr:.1f} dB"
        excess = ((lse[seen].double() - ref_lse[seen]).abs() - FULL.lse_atol - FULL.lse_rtol * ref_lse[seen].abs())
        assert excess.max().item() <= 0, f"{variant}: lse error over the gate by {excess.max().item():.2e}"


@pytest.mark.parametrize("with_seqlens", [False, True], ids=["all_keys", "seqlens"])
@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "causal-" + m[1] if m[0] else "full")
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_decode_matches_references(device, case, mask, with_seqlens, record_error):
    check_decode_case(device, case, mask, with_seqlens, record_error)


# On sm_90, 17 to 64 packed rows at D = 64 and 128 run as 16-row tiles where the call's K and V codes fit L2 (every
# case above), and as 32- or 64-row blocks where they do not: 8 and 16 queries of 4 heads a kv head over 67 MB of
# codes.
@pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
@pytest.mark.parametrize("with_seqlens", [False, True], ids=["all_keys", "seqlens"])
@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "causal-" + m[1] if m[0] else "full")
@pytest.mark.parametrize("case", [(1, 32, 8, 8, 32768, 128), (1, 32, 8, 16, 32768, 128)], ids=case_id)
def test_decode_of_caches_beyond_l2_matches_references(case, mask, with_seqlens, record_error):
    check_decode_case("cuda", case, mask, with_seqlens, record_error)


def check_decode_case(device, case, mask, with_seqlens, record_error):
    is_causal, alignment = mask
    q, k, v = make_inputs(case, 0, device)
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    seqlens = seqlens_for(case, 0).to(device) if with_seqlens else None
    deq = [sdpa_ext.dequantize_fp8(c, s) for c, s in ((q8, qs), (k8, ks), (v8, vs))]
    ref_out, ref_lse = attention_float64(*deq, is_causal, None, alignment, seqlens)
    sdpa_out = sdpa_float32(q, k, v, is_causal, None, alignment, seqlens)
    for variant in decode_variants(device):
        out, lse = run_poisoned(q8, k8, v8, qs, ks, vs, variant, is_causal=is_causal, seqlens_k=seqlens,
                                causal_alignment=alignment)
        check_rows(out, lse, ref_out, ref_lse, variant)
        record_error("kernel-full", sqnr_db=sqnr_db(out, ref_out), max_abs=abs_errors(out, ref_out)[0])
        check_end_to_end_error(out, ref_out, sdpa_out, record_error, variant)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case", [(3, 32, 8, 1, 500, 64), (2, 16, 4, 3, 700, 128), (1, 16, 2, 3, 300, 128),
                                  (1, 32, 1, 5, 300, 64), (1, 8, 1, 12, 300, 128), (1, 8, 2, 40, 300, 64),
                                  (2, 8, 4, 1, 300, 256), (1, 8, 1, 12, 300, 256)],
                         ids=case_id)
def test_query_values_are_quantized_like_quantize_fp8(device, case, dtype):
    # A q of values runs exactly as its quantize_fp8 codes would: the decode kernel quantizes it itself (up to 16
    # rows per head), the op quantizes it first for the other kernels; either way the same codes and scales. Up to
    # 32 packed rows the kernel quantizes fp16/bf16 rows from registers (16 and 32 rows here), beyond that and for
    # fp32 it reads each head twice; MQA at 5 and 12 queries puts a head across two 64-row blocks (32-row blocks at
    # D = 256), whose amax then spans both.
    check_values_quantized_like_codes(*make_inputs(case, 1, device, dtype), device)


@pytest.mark.parametrize("layout", ["heads_inner", "unaligned_rows"])
def test_query_values_in_other_layouts_are_quantized_like_quantize_fp8(device, layout):
    # A [B, Sq, Hq, D] projection seen as [B, Hq, Sq, D] keeps 16-byte aligned rows (the register path); rows one
    # element off their alignment take the path that reads element by element.
    case = (2, 32, 8, 1, 300, 128)
    q, k, v = make_inputs(case, 1, device, torch.bfloat16)
    if layout == "heads_inner":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    else:
        wide = torch.zeros(*q.shape[:-1], q.shape[-1] + 1, dtype=q.dtype, device=device)
        wide[..., 1:] = q
        q = wide[..., 1:]
    check_values_quantized_like_codes(q, k, v, device)


def check_values_quantized_like_codes(q, k, v, device):
    _, _, k8, ks, v8, vs = quantize_all(q, k, v)
    given = torch.rand(q.shape[:2], device=device) * 0.01 + 0.001  # also with a fixed scale
    built = [] if device == "cpu" else sdpa_ext.variant_names(sdpa_ext.device_arch(), q.size(-1))
    variants = decode_variants(device) + built
    for scale in (None, given):
        q8, qs = sdpa_ext.quantize_fp8(q, scale)
        for variant in dict.fromkeys(variants):
            expected = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, variant=variant)
            got = sdpa_ext.fp8_forward(q, k8, v8, scale, ks, vs, True, variant=variant)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), variant


@pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
def test_seqlens_k_change_between_graph_replays():
    # Planned from shapes alone: one captured decode call serves any key counts written into seqlens_k before a
    # replay, as a decode loop over a preallocated cache does.
    device = "cuda"
    case = (4, 32, 8, 1, 5000, 128)
    q, k, v = make_inputs(case, 2, device)
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    deq = [sdpa_ext.dequantize_fp8(c, s) for c, s in ((q8, qs), (k8, ks), (v8, vs))]
    seqlens = torch.full((4,), 10, dtype=torch.int32, device=device)
    call = lambda: sdpa_ext.fp8_forward(q, k8, v8, None, ks, vs, True, seqlens_k=seqlens,  # noqa: E731
                                        causal_alignment="bottom_right")
    call()  # warm-up outside the capture: planning queries the device once
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call()
    for lengths in ([10, 4999, 1, 2500], [5000, 0, 700, 4096]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        ref_out, ref_lse = attention_float64(*deq, True, None, "bottom_right", seqlens)
        check_rows(out.clone(), lse.clone(), ref_out, ref_lse, "decode (graph)")


@pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
@pytest.mark.parametrize("case", [(70000, 4, 1, 16, 3, 64), (70000, 1, 1, 1, 3, 64)], ids=case_id)
def test_more_row_tiles_than_a_grid_dimension_holds(case):
    # 70000 row tiles: past the 65535 blocks of a grid's second dimension. 64-row tiles (decode_wgmma on sm_90) are
    # a block each of a one-dimensional grid; one-row tiles take turns in a persistent grid on sm_90. The rows of
    # the first and last sequences equal those of the same sequences decoded alone.
    q, k, v = make_inputs(case, 5, "cuda")
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    out, lse = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, causal_alignment="bottom_right")
    for rows in (slice(0, 3), slice(-3, None)):
        alone = sdpa_ext.fp8_forward(q8[rows], k8[rows], v8[rows], qs[rows], ks[rows], vs[rows], True,
                                     causal_alignment="bottom_right")
        assert torch.equal(out[rows], alone[0]) and torch.equal(lse[rows], alone[1])


def test_seqlens_beyond_the_keys_are_clamped(device):
    # seqlens_k lives on the device, so the op cannot check it without a sync: values past [0, Sk] act as 0 and Sk.
    case = (3, 4, 2, 2, 50, 64)
    q, k, v = make_inputs(case, 3, device)
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    wild = torch.tensor([-5, 1000, 50], dtype=torch.int32, device=device)
    tame = torch.tensor([0, 50, 50], dtype=torch.int32, device=device)
    for variant in decode_variants(device):
        got = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, variant=variant, seqlens_k=wild,
                                   causal_alignment="bottom_right")
        expected = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, variant=variant, seqlens_k=tame,
                                        causal_alignment="bottom_right")
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), variant


@pytest.mark.parametrize("case", [(2, 8, 2, 1, 300, 128), (2, 32, 8, 16, 300, 64)], ids=case_id)
def test_unused_cache_rows_are_never_read(device, case):
    # Keys past seqlens_k may hold any bytes (an uninitialized cache): NaN codes there must not reach the output.
    q, k, v = make_inputs(case, 4, device)
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    seqlens = torch.tensor([100, 257], dtype=torch.int32, device=device)
    for t in (k8, v8):
        for b, length in enumerate(seqlens.tolist()):
            t.view(torch.uint8)[b, :, length:] = 0x7F  # E4M3 NaN
    for variant in decode_variants(device):
        out, lse = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant=variant, seqlens_k=seqlens)
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse).all()), variant
