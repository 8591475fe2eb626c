"""A q of fp16/bf16 values that the kernels quantize themselves, one scale per 16 rows of a head (fp8_forward's
q_quantization='per_16_rows'), as the drop-in calls them: every variant that does, against float64 attention on
those values, against the per-head path where the two must agree bit for bit, and its bad input."""

import re

import pytest
import torch

import sdpa_ext
from reference import attention_float64, quantized_in_row_groups, sdpa_float32, sqnr_db
from conftest import requires_cuda
from test_attention import (HUGE_LOGIT_CASES, amplified_queries, case_id, check_end_to_end_error, check_kernel_error,
                            drop_in_values, make_qkv, variants_for)

# (B, Hq, Hkv, Sq, Sk, D, causal): rows that end mid-group, GQA, D = 128, causal; one query row and five (decode:
# its heads of up to 16 rows are one group each); 192-row blocks at D = 64 whose last wave is split into 64-row
# units (wgmma_m192 by name: Q quantized into its shared tile); many heads of 128-row blocks.
CASES = [(1, 2, 2, 17, 129, 64, False), (2, 8, 2, 129, 129, 64, True), (1, 6, 3, 100, 100, 128, True),
         (2, 4, 4, 513, 300, 128, False), (1, 2, 2, 1, 1000, 64, False), (4, 8, 2, 5, 300, 128, True),
         (1, 4, 4, 400, 500, 64, False), (3, 32, 8, 200, 200, 128, True)]
# Variants that take q per head only (the Hopper kernels, wgmma*, and decode quantize it per 16 rows themselves).
PER_HEAD_ONLY = ("scalar", "wmma", "pipe3+swizzle", "fp8_split")


def row_group_variants(device, head_dim, seqlen_q):
    """The variants that quantize q per 16 rows themselves: the CPU's, the Hopper kernels (wgmma*) and decode (up to
    16 rows); skips the test where this GPU has none."""
    hopper_or_decode = device != "cpu" and (sdpa_ext.device_arch() == "sm_90" or seqlen_q <= 16)
    names = ["auto"] if device == "cpu" else [
        name for name in variants_for(device, head_dim)
        if (name in ("auto", "fast") and hopper_or_decode) or name.startswith("wgmma")
        or (name.startswith("decode") and seqlen_q <= 16)]
    if not names:
        pytest.skip(f"no variant on {sdpa_ext.device_arch()} quantizes q per 16 rows at Sq = {seqlen_q} "
                    "(the Hopper kernels and decode do)")
    return names


def run_poisoned(q, k8, ks, v8, vs, variant, is_causal=False, causal_alignment="top_left", head_dim=None):
    """fp8_forward_into on q's values (per_16_rows) into NaN-filled buffers of head_dim (q's by default) dims."""
    out = torch.full((*q.shape[:3], head_dim or q.size(3)), float("nan"), dtype=torch.float16, device=q.device)
    lse = torch.full(q.shape[:3], float("nan"), device=q.device)
    sdpa_ext.fp8_forward_into(q, k8, v8, None, ks, vs, out, lse, is_causal, None, variant,
                              causal_alignment=causal_alignment, q_quantization="per_16_rows")
    return out, lse


def key_values(k, v):
    k8, ks, v8, vs = sdpa_ext.quantize_fp8_kv(k, v)
    return (k8, ks, v8, vs), (sdpa_ext.dequantize_fp8(k8, ks), sdpa_ext.dequantize_fp8(v8, vs))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_references(device, case, dtype, record_error):
    is_causal = case[-1]
    q, k, v = make_qkv(case, 6, device, dtype)
    q[:, :, torch.arange(q.size(2)) // 16 % 3 == 1] *= 0.05  # every third group 20x quieter: scales that differ
    codes, values = key_values(k, v)
    ref_out, ref_lse = attention_float64(quantized_in_row_groups(q), *values, is_causal=is_causal)
    sdpa_out = sdpa_float32(q, k, v, is_causal=is_causal)
    for variant in row_group_variants(device, case[5], case[3]):
        out, lse = run_poisoned(q, *codes, variant, is_causal)
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse).all()), variant
        check_kernel_error(out, lse, ref_out, ref_lse, record_error, variant)
        check_end_to_end_error(out, ref_out, sdpa_out, record_error, variant)


@pytest.mark.parametrize("shape", [(100, 357), (300, 129), (5, 3)], ids=["chunk", "past_keys", "decode_past_keys"])
def test_bottom_right_groups_start_at_the_first_row_that_sees_a_key(device, shape, record_error):
    # With Sq > Sk the first Sq - Sk rows see no key (0, lse -inf); q's groups of 16 count from the row after them.
    sq, sk = shape
    q, k, v = make_qkv((1, 4, 2, sq, sk, 64, True), 8, device)
    q[:, :, torch.arange(sq) // 16 % 2 == 1] *= 0.05
    codes, values = key_values(k, v)
    first = max(0, sq - sk)
    ref_out, ref_lse = attention_float64(quantized_in_row_groups(q, first), *values, True, None, "bottom_right")
    seen = torch.isfinite(ref_lse)
    for variant in row_group_variants(device, 64, sq):
        out, lse = run_poisoned(q, *codes, variant, True, "bottom_right")
        assert bool((out[~seen] == 0).all() and (lse[~seen] == float("-inf")).all()), variant
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse[seen]).all()), variant
        check_kernel_error(out[seen], lse[seen], ref_out[seen], ref_lse[seen], record_error, variant)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_groups_of_extreme_amax_stay_finite(device, dtype, record_error):
    # A group's scale is its amax / 448 rounded up to a power of two, but at least 2^-126, so that its reciprocal is
    # a float: a bf16 group of magnitude 2^-130 (amax / 448 below 2^-138) would otherwise encode its zeros as
    # 0 * inf, NaN. Finite input must give finite output (DESIGN.md); with groups of zeros, of the smallest fp16
    # values and of large ones (scales up to 2^93 in bf16, against keys 2^100 smaller, so that the logits stay
    # ordinary: test_huge_logits_in_row_groups has large ones), the result still meets the kernel gate against
    # float64 attention on the same quantization.
    q, k, v = make_qkv((1, 2, 2, 80, 96, 64, False), 11, device, dtype)
    smallest = 2.0**-130 if dtype == torch.bfloat16 else 2.0**-24
    large = 2.0**100 if dtype == torch.bfloat16 else 2.0**10
    q[:, :, :16] = torch.where(q[:, :, :16] > 0, smallest, -smallest)
    q[:, :, :16, ::2] = 0.0
    q[:, :, 16:32] = 0.0
    q[:, :, 32:48] *= large
    k /= large
    codes, values = key_values(k, v)
    ref_out, ref_lse = attention_float64(quantized_in_row_groups(q), *values)
    for variant in row_group_variants(device, 64, q.size(2)):
        out, lse = run_poisoned(q, *codes, variant)
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse).all()), variant
        check_kernel_error(out, lse, ref_out, ref_lse, record_error, variant)


@pytest.mark.parametrize("exponent", [20, 28, 100])
@pytest.mark.parametrize("case", HUGE_LOGIT_CASES, ids=case_id)
def test_huge_logits_in_row_groups(device, case, exponent, record_error):
    # test_attention.py::test_huge_logits with q's groups of 16 rows quantized by the kernels; rows 40-55 straddle
    # two groups, whose other rows quantize to a few small codes.
    q, k, v = amplified_queries(case, exponent, device)
    codes, values = key_values(k, v)
    ref_out, ref_lse = attention_float64(quantized_in_row_groups(q), *values, is_causal=case[-1])
    for variant in row_group_variants(device, case[5], case[3]):
        out, lse = run_poisoned(q, *codes, variant, case[-1])
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse).all()), variant
        check_kernel_error(out, lse, ref_out, ref_lse, record_error, variant)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_groups_with_the_head_amax_give_the_per_head_result(device, head_dim):
    # Where every group of 16 rows holds the head's amax, 7 = 448 * 2^-6, each group's power-of-two scale is the
    # head's amax / 448, so the codes and scales are those of quantize_fp8 and the result must be that of the
    # per-head path, bit for bit.
    q, k, v = make_qkv((2, 8, 2, 150, 300, head_dim, True), 9, device)
    q = q.clamp(-3.5, 3.5)
    q[:, :, ::16, 0] = 7.0
    (k8, ks, v8, vs), _ = key_values(k, v)
    # By name: auto's choice for row groups is a Hopper kernel on sm_90 where per head it may be another.
    names = [name for name in row_group_variants(device, head_dim, q.size(2)) if device == "cpu" or
             name not in ("auto", "fast")]
    for variant in names:
        for is_causal in (False, True):
            rows = sdpa_ext.fp8_forward(q, k8, v8, None, ks, vs, is_causal, variant=variant,
                                        q_quantization="per_16_rows")
            head = sdpa_ext.fp8_forward(q, k8, v8, None, ks, vs, is_causal, variant=variant)
            assert torch.equal(rows[0], head[0]) and torch.equal(rows[1], head[1]), (variant, is_causal)


# (case, q's dims): ViT-H/14's 80 in 128 (whole chunks of 16 values past q), 88 (half a chunk), five rows (decode),
# bottom-right rows before the first key (Sq > Sk).
NARROW_QUERY_CASES = [((2, 8, 2, 150, 300, 128, True), 80), ((2, 8, 2, 150, 300, 128, False), 88),
                      ((1, 4, 4, 5, 300, 64, False), 40), ((1, 4, 2, 40, 24, 64, True), 56)]


@pytest.mark.parametrize("case,q_dims", NARROW_QUERY_CASES, ids=lambda c: case_id(c) if isinstance(c, tuple) else c)
def test_narrow_query_reads_as_zero_padded(device, case, q_dims):
    # A q of fewer dims than k and v (the drop-in at head dims without kernels: k and v codes padded by
    # quantize_fp8_kv's codes_width, q left as it is) gives the bits of q zero-padded to D, from every variant that
    # quantizes q per 16 rows; poisoned buffers fail where a row is not written.
    q, k, v = make_qkv(case, 16, device)
    narrow = q[..., :q_dims].contiguous()
    padded = torch.nn.functional.pad(narrow, (0, case[5] - q_dims))
    (k8, ks, v8, vs), _ = key_values(k, v)
    alignment = "bottom_right" if case[3] > case[4] else "top_left"
    for variant in row_group_variants(device, case[5], case[3]):
        expected = run_poisoned(padded, k8, ks, v8, vs, variant, case[-1], alignment)
        got = run_poisoned(narrow, k8, ks, v8, vs, variant, case[-1], alignment, head_dim=case[5])
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), variant
        assert not torch.isnan(got[0]).any(), variant


def large_query_case(head_dim, is_causal, fewer_rows=0):
    """2 x 16 query heads (4 kv heads of 96 keys) whose q takes 4 MB in 16-bit values, less fewer_rows rows."""
    return (2, 16, 4, (1 << 16) // head_dim - fewer_rows, 96, head_dim, is_causal)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_drop_in_lets_the_kernel_quantize_large_queries(device, head_dim):
    # From 4 MB of q at D = 64 and 128 (KERNEL_QUANTIZES_QUERY_BYTES) the drop-in quantizes k and v alone and lets
    # the kernel quantize q's rows; below, q goes through the quantizer per head.
    for fewer_rows, by_rows in ((0, True), (1, False)):
        q, k, v = make_qkv(large_query_case(head_dim, False, fewer_rows), 10, device)
        by_rows = by_rows and (device == "cpu" or sdpa_ext.device_arch() == "sm_90")  # the kernels that do
        assert sdpa_ext.attention.kernel_quantizes_query(q, head_dim, "auto", False) == by_rows
        out = sdpa_ext.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        (k8, ks, v8, vs), _ = key_values(k, v)
        q8, qs = (q, None) if by_rows else sdpa_ext.quantize_fp8(q)
        expected, _ = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, q_quantization="per_16_rows" if by_rows else
                                           "per_head")
        assert torch.equal(out, expected), fewer_rows


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_drop_in_on_row_groups_matches_sdpa(device, dtype, is_causal, record_error):
    q, k, v = make_qkv(large_query_case(128, is_causal), 13, device, dtype)
    out = sdpa_ext.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    exact_out, _ = attention_float64(*drop_in_values(q, k, v), is_causal=is_causal)
    check_end_to_end_error(out, exact_out, sdpa_float32(q, k, v, is_causal=is_causal), record_error)
    assert sqnr_db(out, exact_out) >= 40.0  # the full tier's kernel gate; a bf16 output alone costs about 59 dB


@requires_cuda
def test_torch_compile_fullgraph_with_large_queries():
    q, k, v = make_qkv(large_query_case(64, True), 15, "cuda")

    def attend(q, k, v):
        return sdpa_ext.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    torch._dynamo.reset()
    assert torch.equal(torch.compile(attend, fullgraph=True)(q, k, v), attend(q, k, v))


def test_strided_and_unaligned_rows_match_contiguous(device):
    # q as a [B, S, H, D] view, and as a view that starts 2 bytes into its storage (copied by the op, whose kernels
    # read q's rows by 16-byte loads): the same bits as a contiguous q.
    q, k, v = make_qkv((2, 8, 2, 100, 150, 64, True), 14, device)
    (k8, ks, v8, vs), _ = key_values(k, v)
    wide = torch.zeros(2, 8, 100, 65, dtype=q.dtype, device=device)
    wide[..., 1:] = q
    for view in (q.transpose(1, 2).contiguous().transpose(1, 2), wide[..., 1:]):
        for variant in row_group_variants(device, 64, q.size(2)):
            got = sdpa_ext.fp8_forward(view, k8, v8, None, ks, vs, True, variant=variant, q_quantization="per_16_rows")
            expected = sdpa_ext.fp8_forward(q, k8, v8, None, ks, vs, True, variant=variant,
                                            q_quantization="per_16_rows")
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), variant


def test_bad_input(device):
    q, k, v = make_qkv((1, 4, 2, 40, 40, 64, False), 11, device)
    (k8, ks, v8, vs), _ = key_values(k, v)

    def expect(match, q=q, q_scale=None, k8=k8, v8=v8, **kwargs):
        with pytest.raises(RuntimeError, match=match):
            sdpa_ext.fp8_forward(q, k8, v8, q_scale, ks, vs, q_quantization=kwargs.pop("mode", "per_16_rows"),
                                 **kwargs)

    expect(r"q_quantization must be 'per_head' or 'per_16_rows', got 'rows'", mode="rows")
    expect(r"q_quantization='per_16_rows' needs q of torch.float16 or torch.bfloat16 values, got Float", q=q.float())
    expect(r"needs q of torch.float16 or torch.bfloat16 values, got Float8_e4m3fn", q=sdpa_ext.quantize_fp8(q)[0],
           q_scale=torch.ones(1, 4, device=device))
    expect(r"q_quantization='per_16_rows' takes the scale of each 16 rows from q itself: q_scale must be None",
           q_scale=torch.ones(1, 4, device=device))
    wide = make_qkv((1, 4, 2, 40, 40, 256, False), 12, device)
    (k256, _, v256, _), _ = key_values(*wide[1:])
    expect(r"q_quantization='per_16_rows' needs head dim 64 or 128, got 256", q=wide[0], k8=k256, v8=v256)
    # A q narrower than k and v: only the kernels that quantize q read it (a multiple of 8 dims, 16-bit values).
    expect(r"q with fewer dims \(40\) than k and v \(64\) needs q_quantization='per_16_rows'", q=q[..., :40],
           mode="per_head")
    expect(r"q: head dim \(size\(-1\)\) must be 64, 128 or 256, got 36", q=q[..., :36])
    expect(r"q: head dim \(size\(-1\)\) must be 64, 128 or 256, got 40", q=q[..., :40].float(), mode="per_head")
    if device != "cpu":
        names = sdpa_ext.variant_names(sdpa_ext.device_arch(), 64)
        for variant in (*(name for name in PER_HEAD_ONLY if name in names), "decode"):  # decode: 40 rows > 16
            expect(rf"variant '{re.escape(variant)}' does not quantize q itself: q_quantization='per_16_rows' needs a "
                   r"Hopper kernel \(wgmma\*, sm_90\) or decode", variant=variant)
