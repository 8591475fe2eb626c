"""The ops as PyTorch sees them: opcheck, torch.compile, CUDA graphs, the variant list."""

import re

import pytest
import torch

import sdpa_ext
from conftest import requires_cuda
from sdpa_ext.variants import TIERS, TOGGLE_DESCRIPTIONS


def qkv(device, seed=0, shape_q=(1, 4, 64, 64), heads_kv=2, seqlen_k=80):
    gen = torch.Generator().manual_seed(seed)
    b, _, _, d = shape_q
    q = torch.randn(shape_q, generator=gen)
    k = torch.randn(b, heads_kv, seqlen_k, d, generator=gen)
    v = torch.randn(b, heads_kv, seqlen_k, d, generator=gen)
    return [t.half().to(device) for t in (q, k, v)]


def quantized(device):
    return [x for t in qkv(device) for x in sdpa_ext.quantize_fp8(t)]


def test_opcheck_fp8_forward(device):
    q8, qs, k8, ks, v8, vs = quantized(device)
    # Raw uint8 codes: opcheck's schema test compares inputs with ops that torch lacks for float8 on CPU.
    args = (q8.view(torch.uint8), k8.view(torch.uint8), v8.view(torch.uint8), qs, ks, vs)
    torch.library.opcheck(torch.ops.sdpa.fp8_forward.default, args)
    torch.library.opcheck(torch.ops.sdpa.fp8_forward.default, args, {"is_causal": True, "out_dtype": torch.bfloat16})
    out = torch.empty(1, 4, 64, 64, dtype=torch.float16, device=device)
    lse = torch.empty(1, 4, 64, device=device)
    torch.library.opcheck(torch.ops.sdpa.fp8_forward_into.default, (*args, out, lse), {"is_causal": True})


def test_opcheck_model_path(device):
    q, k, v = qkv(device, shape_q=(2, 8, 3, 64))
    _, _, k8, ks, v8, vs = [x for t in (q, k, v) for x in sdpa_ext.quantize_fp8(t)]
    codes = (k8.view(torch.uint8), v8.view(torch.uint8))
    lengths = torch.tensor([80, 41], dtype=torch.int32, device=device)
    # q as values, quantized by the op; per-sequence key counts; bottom-right causal rows.
    torch.library.opcheck(torch.ops.sdpa.fp8_forward.default, (q, *codes, None, ks, vs),
                          {"is_causal": True, "seqlens_k": lengths, "causal_alignment": "bottom_right"})
    # q as values that the kernel quantizes per 16 rows (the drop-in's call), where a kernel does.
    if device == "cpu" or sdpa_ext.device_arch() == "sm_90":
        q_rows = qkv(device, shape_q=(2, 8, 40, 64))[0]
        torch.library.opcheck(torch.ops.sdpa.fp8_forward.default, (q_rows, *codes, None, ks, vs),
                              {"is_causal": True, "q_quantization": "per_16_rows"})
        # ... of fewer dims than k and v (their codes zero-padded: a head dim without kernels).
        torch.library.opcheck(torch.ops.sdpa.fp8_forward.default, (q_rows[..., :40].contiguous(), *codes, None, ks, vs),
                              {"q_quantization": "per_16_rows"})
    caches = [torch.zeros(2, 2, 96, 64, dtype=torch.uint8, device=device) for _ in range(2)]
    shift = torch.randn(2, 2, 64, device=device)
    torch.library.opcheck(torch.ops.sdpa.kv_cache_append.default, (k[:, :, :4], v[:, :, :4], *caches, ks, vs, lengths),
                          {"k_shift": shift})


def test_opcheck_quantize(device):
    x = qkv(device)[0]
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8.default, (x,))
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8.default, (x.float(), torch.rand(1, 4, device=device) + 0.1))
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8_qkv.default, tuple(qkv(device)))
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8_qkv.default, tuple(qkv(device)), {"codes_width": 128})
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8_kv.default, tuple(qkv(device)[1:]))
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8_kv.default, tuple(qkv(device)[1:]), {"codes_width": 96})
    torch.library.opcheck(torch.ops.sdpa.quantize_fp8_qkv_smooth_k.default, tuple(qkv(device)))


@pytest.mark.parametrize("head_dim", [64, 80])
def test_torch_compile_fullgraph(device, head_dim, monkeypatch):
    # At D = 80 with q left to the kernel (from any size of q here): k and v codes padded by quantize_fp8_kv, a
    # narrow q and an out of v's dims through fp8_forward_into.
    if head_dim == 80:
        monkeypatch.setattr(sdpa_ext.attention, "KERNEL_QUANTIZES_QUERY_BYTES", 0)
    torch._dynamo.reset()
    q, k, v = qkv(device, seed=1, shape_q=(1, 4, 64, head_dim))

    def attend(q, k, v):
        return sdpa_ext.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2.0

    compiled = torch.compile(attend, fullgraph=True)
    assert torch.equal(compiled(q, k, v), attend(q, k, v))


@requires_cuda
def test_cuda_graph_capture_and_replay():
    q, k, v = qkv("cuda", seed=2)
    attend = lambda: sdpa_ext.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    expected = attend()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        attend()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = attend()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, expected)
    # New values in the captured input buffers flow through quantization and attention on replay.
    for t, new in zip((q, k, v), qkv("cuda", seed=3)):
        t.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, attend())
    assert not torch.equal(static_out, expected)


def test_variants_listing():
    listed = sdpa_ext.variants()
    names = sdpa_ext.variant_names()
    assert "auto" not in names and len(set(names)) == len(names)
    assert [v.stage for v in listed] == sorted(v.stage for v in listed)
    for v in listed:
        assert v.tier in TIERS and v.description and set(v.head_dims) >= {64, 128}
        assert set(v.archs) <= {"sm_80", "sm_89", "sm_90"} and v.archs
        assert (v.name in names) == v.bare and all(f"{v.name}+{t}" in names for t in v.toggles)
        assert all(t in TOGGLE_DESCRIPTIONS for t in v.toggles)


@requires_cuda
def test_built_variants_match_the_python_list():
    q8, qs, k8, ks, v8, vs = quantized("cuda")
    with pytest.raises(RuntimeError, match="valid variants: auto, fast, ") as error:
        sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant="nope")
    built = str(error.value).split("valid variants: auto, fast, ")[1].split("\n")[0].split(", ")
    assert sorted(built) == sorted(sdpa_ext.variant_names())


@requires_cuda
def test_variants_refuse_older_archs():
    q8, qs, k8, ks, v8, vs = quantized("cuda")
    arch = sdpa_ext.device_arch()
    for v in sdpa_ext.variants():
        if arch not in v.archs:
            name = v.builds()[0]
            with pytest.raises(RuntimeError, match=f"variant '{re.escape(name)}' needs sm_"):
                sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant=name)


@requires_cuda
def test_toggle_order_does_not_matter():
    q8, qs, k8, ks, v8, vs = quantized("cuda")
    a = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant="warp_spec+swizzle+2producers")
    b = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant="warp_spec+2producers+swizzle")
    assert torch.equal(a[0], b[0])
    with pytest.raises(RuntimeError, match="'scalar\\+swizzle' is unknown or that toggle combination is not built"):
        sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant="scalar+swizzle")


@requires_cuda
def test_unaligned_rows_fall_back_or_explain():
    q8, qs, k8, ks, v8, vs = quantized("cuda")
    # Codes one byte into a buffer: rows are no longer 16-byte aligned.
    shifted = torch.empty(k8.numel() + 1, dtype=torch.uint8, device="cuda")[1:].view(k8.shape)
    shifted.copy_(k8.view(torch.uint8))
    expected = sdpa_ext.fp8_forward(q8, k8, v8, qs, ks, vs, variant="scalar")
    assert torch.equal(sdpa_ext.fp8_forward(q8, shifted, v8, qs, ks, vs)[0], expected[0])  # auto falls back
    unaligned = [v.builds()[0] for v in sdpa_ext.variants() if v.aligned_rows and sdpa_ext.device_arch() in v.archs]
    for name in unaligned:
        expected_error = f"variant '{re.escape(name)}' needs q, k and v rows aligned to 16 bytes"
        with pytest.raises(RuntimeError, match=expected_error):
            sdpa_ext.fp8_forward(q8, shifted, v8, qs, ks, vs, variant=name)


@requires_cuda
@pytest.mark.parametrize("head_dim", [64, 256])
def test_broadcast_kv_falls_back_or_explains(head_dim):
    # One K/V head shared by both batch entries through stride 0 (expand), with enough keys that auto would pick
    # a TMA variant on sm_90: TMA descriptors cannot step a dimension of stride 0, so auto takes another kernel.
    q, k, v = qkv("cuda", seed=5, shape_q=(1, 4, 64, head_dim), heads_kv=2, seqlen_k=1100)
    q8, qs = sdpa_ext.quantize_fp8(q.expand(2, -1, -1, -1).contiguous())
    (k8, ks), (v8, vs) = (sdpa_ext.quantize_fp8(t) for t in (k, v))
    k8b, v8b = (t.expand(2, -1, -1, -1) for t in (k8, v8))
    ksb, vsb = (s.expand(2, -1).contiguous() for s in (ks, vs))
    expected = sdpa_ext.fp8_forward(q8, k8b.contiguous(), v8b.contiguous(), qs, ksb, vsb, variant="scalar")
    out, lse = sdpa_ext.fp8_forward(q8, k8b, v8b, qs, ksb, vsb)
    assert (out.float() - expected[0].float()).abs().max().item() < 2e-3
    assert (lse - expected[1]).abs().max().item() < 1e-3
    for name in sdpa_ext.variant_names(sdpa_ext.device_arch(), head_dim):
        if name.startswith("wgmma"):
            with pytest.raises(RuntimeError, match="no stride 0 on a dimension longer than 1"):
                sdpa_ext.fp8_forward(q8, k8b, v8b, qs, ksb, vsb, variant=name)
