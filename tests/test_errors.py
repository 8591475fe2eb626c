"""Bad input raises an error that names the argument and what was expected; it never crashes or runs."""

import re

import pytest
import torch

import sdpa_ext
from conftest import CUDA_SKIP


def valid_args(device, b=1, hq=4, hkv=2, sq=16, sk=24, d=64):
    q = torch.randint(0, 0x7E, (b, hq, sq, d), dtype=torch.uint8, device=device)
    k = torch.randint(0, 0x7E, (b, hkv, sk, d), dtype=torch.uint8, device=device)
    v = torch.randint(0, 0x7E, (b, hkv, sk, d), dtype=torch.uint8, device=device)
    scales = [torch.ones(b, h, device=device) for h in (hq, hkv, hkv)]
    return [q, k, v, *scales]


def replaced(args, index, value):
    args = list(args)
    args[index] = value
    return args


Q, K, V, QS, KS, VS = range(6)


def expect_error(args, match, **kwargs):
    with pytest.raises(RuntimeError, match=match):
        sdpa_ext.fp8_forward(*args, **kwargs)


def test_wrong_dtype(device):
    args = valid_args(device)
    # q may be E4M3 codes or fp16/bf16/fp32 values (quantized by the op), nothing else.
    expect_error(replaced(args, Q, args[Q].double()), r"q must be E4M3 codes \(torch.float8_e4m3fn or torch.uint8\) "
                 r"or torch.float16, torch.bfloat16 or torch.float32 values to quantize, got Double")
    expect_error(replaced(args, K, args[K].half()), r"k must be torch.float8_e4m3fn or torch.uint8 .* got Half")
    expect_error(replaced(args, QS, None), r"q_scale is required when q holds E4M3 codes")


def test_wrong_rank(device):
    args = valid_args(device)
    expect_error(replaced(args, K, args[K][0]), r"k must have 4 dims \[B, H, S, D\], got 3 dims")


def test_device_mix(device):
    args = valid_args(device)
    # Without a GPU the second device is 'meta', which reaches the fake implementation's check instead.
    other = "meta" if device == "cpu" else "cpu"
    expect_error(replaced(args, VS, args[VS].to(other)), rf"v_scale must be on the same device as q \({device}")
    if device != "cpu":
        expect_error(replaced(args, K, args[K].cpu()), r"k must be on the same device as q \(cuda")
        x = torch.randn(1, 2, 8, 64, device=device)
        with pytest.raises(RuntimeError, match=r"v must be on the same device as q \(cuda"):
            sdpa_ext.quantize_fp8_qkv(x, x, x.cpu())


def test_shape_mismatch(device):
    args = valid_args(device)
    expect_error(replaced(args, V, args[V][:, :, :-1]), r"v must have the same shape as k \[1, 2, 24, 64\]")
    wrong_batch = valid_args(device, b=2)[K]
    expect_error(replaced(args, K, wrong_batch), r"k must have shape \[B, Hkv, Sk, D\] with B = 1")


def test_unsupported_head_dim(device):
    expect_error(valid_args(device, d=96), r"head dim \(size\(-1\)\) must be 64, 128 or 256, got 96")


@pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
def test_variant_not_built_for_the_head_dim():
    expect_error(valid_args("cuda", d=256), r"variant 'wmma' is built for head dims 64 and 128, got 256",
                 variant="wmma")


@pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
def test_head_dim_lists_agree_with_the_kernels():
    # Which variants take D = 256 is written twice: the C++ variant table (max_head_dim) and sdpa_ext/variants.py.
    # Every variant this GPU runs must accept D = 256 exactly when variant_names(head_dim=256) lists it.
    arch = sdpa_ext.device_arch()
    wide = set(sdpa_ext.variant_names(arch, 256))
    args = valid_args("cuda", d=256)
    for name in sdpa_ext.variant_names(arch):
        if name in wide:
            sdpa_ext.fp8_forward(*args, variant=name)
        else:
            expect_error(args, rf"variant '{re.escape(name)}' is built for head dims 64 and 128, got 256",
                         variant=name)


def test_heads_not_a_multiple(device):
    expect_error(valid_args(device, hq=6, hkv=4), r"q heads \(6\) must be a multiple of k/v heads \(4\)")


def test_wrong_scale_shape_and_dtype(device):
    args = valid_args(device)
    expect_error(replaced(args, QS, args[QS][:, :2]), r"q_scale must have shape \[B, Hq\] = \[1, 4\], got \[1, 2\]")
    expect_error(replaced(args, KS, args[KS].double()), r"k_scale must be torch.float32, got Double")


def test_non_contiguous_last_dim(device):
    args = valid_args(device)
    q = args[Q]
    strided = torch.empty(q.shape[:-1] + (2 * q.shape[-1],), dtype=q.dtype, device=device)[..., ::2]
    expect_error(replaced(args, Q, strided), r"q must have a contiguous last dim \(stride\(-1\) == 1\)")


def test_empty_tensors(device):
    expect_error(valid_args(device, sq=0), r"q must be non-empty, got shape \[1, 4, 0, 64\]")
    expect_error(valid_args(device, sk=0), r"k must be non-empty")


def test_bad_out_dtype_scale_and_variant(device):
    args = valid_args(device)
    expect_error(args, r"out_dtype must be torch.float16 or torch.bfloat16, got Float", out_dtype=torch.float32)
    expect_error(args, r"scale must be finite, got nan", scale=float("nan"))
    expected = r"variant 'nope' is not available on CPU" if device == "cpu" else r"variant 'nope' is unknown or that toggle combination is not built; valid variants: auto, fast, scalar"
    expect_error(args, expected, variant="nope")


def test_bad_output_buffers(device):
    args = valid_args(device)
    out = torch.empty(1, 4, 16, 64, dtype=torch.float16, device=device)
    lse = torch.empty(1, 4, 16, device=device)
    with pytest.raises(RuntimeError, match=r"out must have shape \[B, Hq, Sq, D\]"):
        sdpa_ext.fp8_forward_into(*args, out[:, :, :8], lse)
    for dims in (60, 72):  # fewer dims than D must be a multiple of 8; more than D never
        wrong = torch.empty(1, 4, 16, dims, dtype=torch.float16, device=device)
        with pytest.raises(RuntimeError, match=r"out must have shape \[B, Hq, Sq, D\] = \[1, 4, 16, 64\] \(or fewer "
                                               r"dims than D, a multiple of 8\), got \[1, 4, 16, " + str(dims)):
            sdpa_ext.fp8_forward_into(*args, wrong, lse)
    with pytest.raises(RuntimeError, match=r"out must be torch.float16 or torch.bfloat16, got Float"):
        sdpa_ext.fp8_forward_into(*args, out.float(), lse)
    with pytest.raises(RuntimeError, match=r"lse must have shape \[B, Hq, Sq\] = \[1, 4, 16\]"):
        sdpa_ext.fp8_forward_into(*args, out, lse[..., :3])


def test_quantize_bad_input(device):
    x = torch.randn(1, 2, 8, 64, device=device)
    with pytest.raises(RuntimeError, match=r"x must be torch.float16, torch.bfloat16 or torch.float32, got Int"):
        sdpa_ext.quantize_fp8(x.int())
    with pytest.raises(RuntimeError, match=r"x must have 4 dims \[B, H, S, D\], got 3 dims"):
        sdpa_ext.quantize_fp8(x[0])
    with pytest.raises(RuntimeError, match=r"x must be non-empty"):
        sdpa_ext.quantize_fp8(x[:, :, :0])
    with pytest.raises(RuntimeError, match=r"scale must have shape \[B, H\] = \[1, 2\], got \[2\]"):
        sdpa_ext.quantize_fp8(x, torch.ones(2, device=device))
    # quantize_fp8_qkv names the offending input
    with pytest.raises(RuntimeError, match=r"q must be torch.float16, torch.bfloat16 or torch.float32, got Int"):
        sdpa_ext.quantize_fp8_qkv(x.int(), x, x)
    with pytest.raises(RuntimeError, match=r"v must have 4 dims \[B, H, S, D\], got 3 dims"):
        sdpa_ext.quantize_fp8_qkv(x, x, x[0])
    with pytest.raises(RuntimeError, match=r"k must be non-empty"):
        sdpa_ext.quantize_fp8_qkv(x, x[:, :, :0], x)
    # and quantize_fp8_kv
    with pytest.raises(RuntimeError, match=r"v must have the dtype of k \(Float\), got Half"):
        sdpa_ext.quantize_fp8_kv(x, x.half())
    with pytest.raises(RuntimeError, match=r"k must be torch.float16, torch.bfloat16 or torch.float32, got Int"):
        sdpa_ext.quantize_fp8_kv(x.int(), x)


def test_bad_seqlens_and_alignment(device):
    args = valid_args(device, b=2)
    lengths = torch.tensor([3, 24], dtype=torch.int32, device=device)
    expect_error(args, r"seqlens_k must be torch.int32, got Long", seqlens_k=lengths.long())
    expect_error(args, r"seqlens_k must have shape \[B\] = \[2\], got \[1, 2\]", seqlens_k=lengths[None])
    other = "meta" if device == "cpu" else "cpu"
    expect_error(args, rf"seqlens_k must be on the same device as q \({device}", seqlens_k=lengths.to(other))
    expect_error(args, r"causal_alignment must be 'top_left' or 'bottom_right', got 'bottom'",
                 is_causal=True, causal_alignment="bottom")
    if device != "cpu":
        expect_error(args, r"variant 'wmma' does not take seqlens_k; use variant='auto' or 'decode'",
                     seqlens_k=lengths, variant="wmma")


def test_kv_cache_append_bad_input(device):
    k = torch.randn(2, 4, 3, 64, device=device)
    cache = torch.zeros(2, 4, 16, 64, dtype=torch.uint8, device=device)
    scale = torch.ones(2, 4, device=device)
    start = torch.zeros(2, dtype=torch.int32, device=device)

    def expect(match, **changes):
        args = dict(k=k, v=k, k_cache=cache, v_cache=cache.clone(), k_scale=scale, v_scale=scale, start=start)
        args.update(changes)
        with pytest.raises(RuntimeError, match=match):
            sdpa_ext.kv_cache_append(**args)

    expect(r"k must be torch.float16, torch.bfloat16 or torch.float32, got Int", k=k.int())
    expect(r"v must have the dtype of k \(Float\), got Half", v=k.half())
    expect(r"v must have the shape of k \[2, 4, 3, 64\], got \[2, 4, 2, 64\]", v=k[:, :, :2])
    expect(r"k_cache must be torch.float8_e4m3fn or torch.uint8", k_cache=cache.float())
    expect(r"k_cache must have shape \[B, H, capacity, D\] with B, H, D of k", k_cache=cache[:, :2])
    expect(r"v_cache must have the shape of k_cache", v_cache=cache[:, :, :8])
    expect(r"k_scale must have shape \[B, H\] = \[2, 4\], got \[4\]", k_scale=scale[0])
    expect(r"start must be a torch.int32 tensor of shape \[B\] = \[2\], got Long", start=start.long())
    expect(r"k_shift must be a torch.float32 tensor of shape \[B, H, D\] = \[2, 4, 64\]",
           k_shift=torch.zeros(2, 4, 32, device=device))
