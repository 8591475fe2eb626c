"""sdpa_ext.patch_torch_sdpa(): F.scaled_dot_product_attention swapped for the drop-in inside a `with` block, the
way vision models (timm) and diffusion pipelines take an attention kernel."""

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import sdpa_ext
from sdpa_ext.attention import fallback_counts
from reference import sdpa_float32, sqnr_db


def inputs(device, shape=(2, 4, 48, 64), dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(device, dtype) for _ in range(3)]


class TimmLikeAttention(torch.nn.Module):
    """Self-attention as timm's vision transformers write it: one qkv projection, strided q/k/v views, and
    F.scaled_dot_product_attention looked up at call time."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, dim))


def test_patch_routes_torch_sdpa_to_the_drop_in_and_restores_it(device):
    q, k, v = inputs(device)
    original = F.scaled_dot_product_attention
    with sdpa_ext.patch_torch_sdpa(variant="auto"):
        assert F.scaled_dot_product_attention is not original
        patched = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        patched_mask = F.scaled_dot_product_attention(q[:, :, :5], k, v, attn_mask=causal_lower_right(5, 48))
    assert F.scaled_dot_product_attention is original
    assert torch.equal(patched, sdpa_ext.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.equal(patched_mask, sdpa_ext.scaled_dot_product_attention(
        q[:, :, :5], k, v, attn_mask=causal_lower_right(5, 48)))

    with pytest.raises(RuntimeError, match="inside"), sdpa_ext.patch_torch_sdpa():
        raise RuntimeError("inside")
    assert F.scaled_dot_product_attention is original


@pytest.mark.parametrize("head_dim", [64, 80])
def test_patched_timm_like_block_matches_torch_sdpa(device, head_dim):
    # ViT-H/14 has head dim 80: the drop-in pads it to 128 (exact), so the patched model runs, never raises.
    heads, dim = 4, 4 * head_dim
    torch.manual_seed(0)
    block = TimmLikeAttention(dim, heads).to(device, torch.float16)
    x = torch.randn(2, 50, dim, device=device, dtype=torch.float16)
    with torch.inference_mode():
        expected = block(x)
        with sdpa_ext.patch_torch_sdpa():
            out = block(x)
    # Per-head E4M3 q, k, v keep about 26 dB end to end on randn inputs (test_attention's smoothing test); the
    # projection averages that noise over 4 heads.
    assert sqnr_db(out, expected) >= 25.0


@pytest.mark.parametrize("case, reason", [
    ("bool_mask", "an attn_mask tensor"),
    ("float32", "dtype torch.float32"),
    ("head_dim_320", "head dim 320 > 256"),
])
def test_patched_calls_the_drop_in_cannot_take_run_torch_sdpa(case, reason):
    q, k, v = inputs("cpu", shape=(1, 2, 16, 320 if case == "head_dim_320" else 64))
    kwargs = {}
    if case == "bool_mask":
        kwargs["attn_mask"] = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
    elif case == "float32":
        q, k, v = q.float(), k.float(), v.float()
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    before = fallback_counts().get(reason, 0)
    with sdpa_ext.patch_torch_sdpa(), pytest.warns(UserWarning, match=reason) if before == 0 else contextlib.nullcontext():
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert torch.equal(out, expected)
    assert fallback_counts()[reason] == before + 1


def test_patched_dropout_and_autograd_run_torch_sdpa():
    q, k, v = inputs("cpu", dtype=torch.float32)
    q16 = q.half().requires_grad_()
    before = fallback_counts()
    with sdpa_ext.patch_torch_sdpa(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warned once per reason: test_patched_calls_... checks the warning
        dropped = F.scaled_dot_product_attention(q.half(), k.half(), v.half(), dropout_p=0.5)
        out = F.scaled_dot_product_attention(q16, k.half(), v.half())
    out.float().sum().backward()  # torch SDPA's graph: the drop-in has no backward
    assert q16.grad is not None
    assert sqnr_db(out.detach(), sdpa_float32(q16.detach(), k.half(), v.half())) >= 40.0
    assert dropped.shape == q.shape
    for reason in ("dropout_p > 0", "inputs that require grad"):
        assert fallback_counts()[reason] == before.get(reason, 0) + 1
