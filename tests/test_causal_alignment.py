"""Bottom-right causal alignment (a chunk of queries appended after cached keys) on every variant, and the drop-in
taking torch's CausalBias masks exactly as F.scaled_dot_product_attention does."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import sdpa_ext
from reference import attention_float64, sdpa_float32
from test_attention import (check_end_to_end_error, check_kernel_error, drop_in_values, make_qkv, quantize_all,
                            variants_for)

# (B, Hq, Hkv, Sq, Sk, D, causal): chunks shorter than the keys (the usual chunked prefill; key tiles that the
# shifted diagonal crosses, whole tiles below it), equal (the same mask as top-left), and longer (rows that see no
# key); D = 128 and GQA; a chunk of 1000 after 3000 keys takes the Hopper kernels.
CASES = [(1, 4, 2, 100, 357, 64), (2, 8, 2, 129, 1000, 128), (1, 2, 2, 64, 64, 64), (1, 4, 4, 300, 129, 64),
         (1, 16, 4, 1000, 3000, 128)]


def case_id(case):
    return "x".join(map(str, case))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bottom_right_matches_references(device, case, record_error):
    q, k, v = make_qkv((*case, True), 0, device)
    q8, qs, k8, ks, v8, vs = quantize_all(q, k, v)
    deq = [sdpa_ext.dequantize_fp8(c, s) for c, s in ((q8, qs), (k8, ks), (v8, vs))]
    ref_out, ref_lse = attention_float64(*deq, True, None, "bottom_right")
    sdpa_out = sdpa_float32(q, k, v, True, None, "bottom_right")
    seen = torch.isfinite(ref_lse)
    for variant in variants_for(device):
        b, hq, sq, d = q.shape
        out = torch.full((b, hq, sq, d), float("nan"), dtype=torch.float16, device=device)
        lse = torch.full((b, hq, sq), float("nan"), device=device)
        sdpa_ext.fp8_forward_into(q8, k8, v8, qs, ks, vs, out, lse, True, None, variant,
                                  causal_alignment="bottom_right")
        assert bool((out[~seen] == 0).all() and (lse[~seen] == float("-inf")).all()), variant
        assert bool(torch.isfinite(out).all() and torch.isfinite(lse[seen]).all()), variant
        check_kernel_error(out[seen], lse[seen], ref_out[seen], ref_lse[seen], record_error, variant)
        check_end_to_end_error(out, ref_out, sdpa_out, record_error, variant)


def test_alignments_agree_on_square_inputs(device):
    q8, qs, k8, ks, v8, vs = quantize_all(*make_qkv((2, 4, 2, 200, 200, 64, True), 1, device))
    for variant in variants_for(device):
        top = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, variant=variant)
        bottom = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, True, variant=variant, causal_alignment="bottom_right")
        assert torch.equal(top[0], bottom[0]) and torch.equal(top[1], bottom[1]), variant


@pytest.mark.parametrize("bias", [causal_lower_right, causal_upper_left], ids=["lower_right", "upper_left"])
@pytest.mark.parametrize("shape", [(5, 300), (300, 300), (64, 37)], ids=["chunk", "square", "past_keys"])
def test_drop_in_takes_causal_bias(device, bias, shape, record_error):
    sq, sk = shape
    q, k, v = make_qkv((2, 8, 2, sq, sk, 64, True), 2, device)
    mask = bias(sq, sk)
    out = sdpa_ext.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    alignment = "bottom_right" if bias is causal_lower_right else "top_left"
    first_row = max(0, sq - sk) if alignment == "bottom_right" else 0  # where q's row groups start (if it has them)
    exact_out, _ = attention_float64(*drop_in_values(q, k, v, first_row=first_row), True, None, alignment)
    sdpa_out = sdpa_float32(q, k, v, True, None, alignment)
    check_end_to_end_error(out, exact_out, sdpa_out, record_error)
    if sq <= sk or bias is causal_upper_left:
        # torch's own answer where it has one (its lower-right mask gives NaN rows once Sq > Sk; sdpa_ext gives 0).
        group = q.size(1) // k.size(1)
        torch_out = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(group, 1),
                                                   v.float().repeat_interleave(group, 1), attn_mask=mask)
        assert torch.allclose(torch_out, sdpa_out, atol=1e-5)


def test_drop_in_rejects_bad_causal_bias():
    q = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="is_causal must be False when attn_mask is a CausalBias"):
        sdpa_ext.scaled_dot_product_attention(q, q, q, attn_mask=causal_lower_right(8, 8), is_causal=True)
    with pytest.raises(ValueError, match="CausalBias for seq_len_q=4, seq_len_kv=8, but q has 8 rows and k 8"):
        sdpa_ext.scaled_dot_product_attention(q, q, q, attn_mask=causal_lower_right(4, 8))
