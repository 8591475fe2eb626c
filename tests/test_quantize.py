"""quantize_fp8 must produce exactly torch's E4M3 codes: (x / scale).to(torch.float8_e4m3fn)."""

import pytest
import torch

import sdpa_ext

E4M3_MAX_CODE = 0x7E


# torch 2.13 saturates |x / scale| >= 464 to +-448, as the contract does; torch 2.11 (seen on the GPU machine)
# returns NaN there. Below 464 every version rounds to nearest even, so that is where codes must match torch.
TORCH_FINITE_LIMIT = 464.0


def torch_codes(x, scale):
    """The contract's definition of the codes, computed by torch on the CPU (IEEE division) in fp32."""
    quotient = x.cpu().float() / scale.cpu()[:, :, None, None]
    return quotient, quotient.to(torch.float8_e4m3fn).view(torch.uint8)


def assert_codes_match_torch(codes, x, scale):
    quotient, expected = torch_codes(x, scale)
    codes = codes.cpu()
    overflow = quotient.abs() >= TORCH_FINITE_LIMIT
    assert torch.equal(codes[~overflow], expected[~overflow])
    saturated = torch.where(quotient > 0, E4M3_MAX_CODE, 0x80 | E4M3_MAX_CODE).to(torch.uint8)
    assert torch.equal(codes[overflow], saturated[overflow])


def exact_scale(x):
    """amax / 448 correctly rounded to fp32 (float64 division then rounding is exact for a quotient), 1 for zeros.

    torch on CUDA divides a tensor by a Python scalar as a multiplication by its reciprocal, which can differ
    from the IEEE quotient in the last bit, so the reference is computed this way on every device.
    """
    amax = x.abs().amax(dim=(2, 3)).double().cpu()
    return torch.where(amax > 0, amax / 448.0, torch.ones_like(amax)).float()


def same_bits(a, b):
    """Equal dtype, shape and bits (E4M3 codes compared as bytes)."""
    as_bytes = lambda t: t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t  # noqa: E731
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))


def our_codes(x, scale=None):
    codes, scales = sdpa_ext.quantize_fp8(x, scale)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == x.shape
    return codes.view(torch.uint8), scales


def all_bit_patterns(dtype, device):
    """Every 16-bit pattern as a [1, 1, 256, 256] tensor of dtype, NaNs excluded (their codes only need be NaN)."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = bits.view(dtype).reshape(1, 1, 256, 256).to(device)
    return torch.where(torch.isnan(x), torch.zeros_like(x), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16bit_value_encodes_like_torch(device, dtype):
    x = all_bit_patterns(dtype, device)
    for scale_value in (1.0, 0.37, 2.0**-20):  # unit, arbitrary, and one that pushes most values into saturation
        scale = torch.full((1, 1), scale_value, device=device)
        codes, scales = our_codes(x, scale)
        assert_codes_match_torch(codes, x, scale)
        assert torch.equal(scales, scale)


def test_random_fp32_values_encode_like_torch(device):
    gen = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (1, 4, 512, 128), generator=gen, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x)).to(device)
    scale = torch.rand(1, 4, generator=gen).add(0.01).mul(2.0**torch.randint(-40, 40, (1, 4), generator=gen)).to(device)
    codes, _ = our_codes(x, scale)
    assert_codes_match_torch(codes, x, scale)


def e4m3_positive_values():
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # 0x7F is NaN
    return codes.view(torch.float8_e4m3fn).float()


def test_round_half_to_even_ties(device):
    values = e4m3_positive_values()
    midpoints = (values[:-1] + values[1:]) / 2  # exact in fp32; each is a tie between two neighbours
    x = torch.cat([midpoints, -midpoints]).reshape(1, 1, 2, -1).to(device)
    scale = torch.ones(1, 1, device=device)
    codes, _ = our_codes(x, scale)
    assert_codes_match_torch(codes, x, scale)
    expected = torch_codes(x, scale)[1]
    # Half to even: a tie lands on the neighbour whose code is even.
    assert bool((expected[0, 0, 0] % 2 == 0).all())


def test_subnormals(device):
    steps = torch.arange(0, 40, dtype=torch.float32) * 2.0**-11  # quarter steps across the subnormal range
    x = torch.cat([steps, -steps]).reshape(1, 1, 1, -1).to(device)
    scale = torch.ones(1, 1, device=device)
    codes, _ = our_codes(x, scale)
    assert_codes_match_torch(codes, x, scale)
    assert codes[0, 0, 0, 4].item() == 0x01  # 2^-9, the smallest subnormal
    assert codes[0, 0, 0, 2].item() == 0x00  # 2^-10 ties to even: zero


def test_saturation_to_448(device):
    big = torch.tensor([448.0, 449.0, 463.99, 464.0, 479.0, 480.0, 1e4, 3e38, float("inf")])
    x = torch.cat([big, -big]).reshape(1, 1, 1, -1).to(device)
    scale = torch.ones(1, 1, device=device)
    codes, _ = our_codes(x, scale)
    n = big.numel()
    assert bool((codes[..., :n] == E4M3_MAX_CODE).all()) and bool((codes[..., n:] == 0x80 | E4M3_MAX_CODE).all())
    assert_codes_match_torch(codes, x, scale)


def test_nan_input_gives_nan_code(device):
    x = torch.tensor([float("nan"), 1.0]).reshape(1, 1, 1, 2).to(device)
    codes, _ = our_codes(x, torch.ones(1, 1, device=device))
    assert codes[0, 0, 0, 0].item() & 0x7F == 0x7F


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [
    (1, 2, 1, 1), (2, 3, 17, 64), (1, 8, 512, 64), (2, 2, 1000, 128), (2, 4, 300, 256),
    (4, 16, 385, 128),  # many heads too large for 3 blocks per SM: the streaming clusters (sm_90)
    (2, 24, 1100, 256),  # streaming clusters of 512-thread blocks, heads over 512 KB (16-bit inputs, sm_90)
    (1, 36, 4096, 128),  # streaming clusters of 16 512-thread blocks: 1 MB heads (16-bit inputs, sm_90)
    (4, 16, 1930, 128),  # streaming clusters of 16 blocks whose shares start mid-row (16-bit inputs, sm_90)
    (4, 16, 3200, 80),  # streaming clusters, rows of 10 vectors: a block's 256 threads do not step whole rows
    (8, 16, 257, 80),  # a block per head, rows of 10 vectors: its 512 threads do not step whole rows
    (1, 2, 4096, 128),  # heads too large for a cluster or shared memory: the two-pass kernels
    (1, 2, 8192, 80),  # the two-pass kernels, rows of 10 vectors: a block's 256 threads do not step whole rows
])
def test_per_head_scale_and_codes(device, dtype, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen).mul(3).to(dtype).to(device)
    x[0, 0].zero_()  # a head of zeros gets scale 1
    codes, scales = our_codes(x)
    expected_scale = exact_scale(x)
    assert scales.dtype == torch.float32 and torch.equal(scales.cpu(), expected_scale)
    assert scales[0, 0].item() == 1.0
    assert torch.equal(codes.cpu(), torch_codes(x, expected_scale)[1])  # |x / scale| <= 448: no overflow
    # The largest magnitude of every non-zero head encodes to +-448.
    head_max_codes = (codes.reshape(-1, codes[0, 0].numel()) & 0x7F).amax(dim=-1)
    assert bool((head_max_codes[1:] == E4M3_MAX_CODE).all())


def test_strided_input(device):
    x = torch.randn(2, 33, 4, 64, dtype=torch.float16, device=device).transpose(1, 2)  # [B, S, H, D] viewed as BHSD
    codes, scales = our_codes(x)
    contiguous_codes, contiguous_scales = our_codes(x.contiguous())
    assert torch.equal(codes, contiguous_codes) and torch.equal(scales, contiguous_scales)


def test_dequantize_round_trip_error_bound(device):
    x = torch.randn(2, 4, 128, 64, device=device)
    codes, scales = sdpa_ext.quantize_fp8(x)
    back = sdpa_ext.dequantize_fp8(codes, scales)
    assert back.dtype == torch.float32 and back.shape == x.shape
    # Round to nearest with 3 mantissa bits: error <= 2^-4 relative for normals, <= 2^-10 * scale below 2^-6.
    s = scales[:, :, None, None]
    bound = torch.maximum(x.abs() * 2.0**-4, s * 2.0**-10)
    assert bool(((back - x).abs() <= bound).all())
    assert torch.equal(sdpa_ext.dequantize_fp8(codes.view(torch.uint8), scales), back)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shapes", [
    ((1, 8, 512, 64), (1, 2, 512, 64)),     # one launch on CUDA: a cluster per head (sm_90) or a block per head
    ((2, 4, 33, 128), (2, 4, 40, 128)),     # odd row counts
    ((1, 3, 50, 20), (1, 3, 70, 20)),       # 16-bit rows not in 16-byte vectors: a block per head on any GPU
    ((1, 2, 4096, 128), (1, 1, 3000, 128)), # heads too large for a cluster or shared memory: the two-pass kernels
    ((8, 8, 256, 64), (8, 2, 200, 64)),     # many small heads: a block per head
    ((32, 12, 197, 64), (32, 12, 197, 64)),  # more short heads than 512-thread blocks fit: 256 threads (16-bit, sm_90)
    ((64, 12, 50, 20), (64, 12, 70, 20)),   # 256-thread blocks, 16-bit rows not in 16-byte vectors
    ((4, 16, 385, 128), (4, 8, 300, 128)),  # many heads too large for 3 blocks per SM: streaming clusters (sm_90)
    ((2, 16, 1536, 256), (2, 8, 1536, 256)),  # streaming clusters of 512-thread blocks (16-bit inputs, sm_90)
    ((2, 16, 1930, 128), (2, 8, 2048, 128)),  # streaming clusters of 16 blocks, shares of two sizes
    ((4, 16, 1024, 64), (4, 8, 1024, 64)),  # streaming clusters of two 512-thread blocks: heads up to 128 KB
])
def test_qkv_in_one_call_matches_three(device, dtype, shapes):
    q_shape, kv_shape = shapes
    gen = torch.Generator().manual_seed(q_shape[2])
    q, k, v = (torch.randn(s, generator=gen).mul(2).to(dtype).to(device) for s in (q_shape, kv_shape, kv_shape))
    k = k.transpose(1, 2).contiguous().transpose(1, 2)  # strided input
    v[0, 0].zero_()
    together = sdpa_ext.quantize_fp8_qkv(q, k, v)
    separately = [x for t in (q, k, v) for x in sdpa_ext.quantize_fp8(t)]
    for a, b in zip(together, separately):
        assert same_bits(a, b)
    for x, codes, scales in zip((q, k, v), together[::2], together[1::2]):  # and the contract, independently
        assert torch.equal(scales.cpu(), exact_scale(x))
        assert_codes_match_torch(codes.view(torch.uint8), x, scales)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 2, 512, 64), (8, 8, 256, 64), (32, 12, 197, 64), (4, 16, 385, 128),
                                   (4, 16, 1024, 64), (1, 2, 4096, 128)])
def test_kv_in_one_call_matches_two(device, dtype, shape):
    # quantize_fp8_kv (k and v for a q that the attention kernel quantizes itself) takes the paths of
    # quantize_fp8_qkv with two tensors: each is bit-identical to its own quantize_fp8.
    gen = torch.Generator().manual_seed(shape[2])
    k, v = (torch.randn(shape, generator=gen).mul(2).to(dtype).to(device) for _ in range(2))
    k = k.transpose(1, 2).contiguous().transpose(1, 2)  # strided input
    together = sdpa_ext.quantize_fp8_kv(k, v)
    separately = [x for t in (k, v) for x in sdpa_ext.quantize_fp8(t)]
    for a, b in zip(together, separately):
        assert same_bits(a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_qkv_encodes_every_16bit_value_like_quantize_fp8(device, dtype):
    # With the amax scale every pattern lands somewhere in [-448, 448], ties and subnormals included.
    x = all_bit_patterns(dtype, device)
    x = torch.where(torch.isinf(x), torch.zeros_like(x), x)
    expected = sdpa_ext.quantize_fp8(x)
    together = sdpa_ext.quantize_fp8_qkv(x, x, x)
    for codes, scale in zip(together[::2], together[1::2]):
        assert torch.equal(codes.view(torch.uint8), expected[0].view(torch.uint8))
        assert torch.equal(scale, expected[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(8, 1, 1024, 64), (1, 128, 64, 64), (1, 8, 512, 128), (1, 1, 4096, 128)])
def test_amax_scales_encode_every_16bit_value_like_torch(device, dtype, shape):
    """Under a scale from a head's own amax the CUDA kernels divide by a multiply and two FMAs (E4m3Divisor), whose
    quotient must be IEEE division's. Eight blocks of every finite value up to an amax (the dtype's largest, 448, 1,
    0.37, 2^-6, the smallest normal, a subnormal, 2^-20), zero-padded and shuffled into heads of four sizes (one
    block each, 16 per block, ...; the quantizer's kernels by head size), checked against torch bit for bit."""
    values = all_bit_patterns(dtype, "cpu").reshape(-1)
    values = values[torch.isfinite(values)]
    info = torch.finfo(dtype)
    blocks = []
    for amax in (info.max, 448.0, 1.0, 0.37, 2.0**-6, info.tiny, info.tiny / 4, 2.0**-20):
        block = values[values.float().abs() <= torch.tensor(amax, dtype=dtype).float()]
        blocks.append(torch.cat([block, torch.zeros(2**16 - block.numel(), dtype=dtype)]))
    x = torch.stack(blocks)
    x = x[:, torch.randperm(2**16, generator=torch.Generator().manual_seed(0))].reshape(shape).to(device)
    scale = exact_scale(x)
    for codes, scales in (our_codes(x), sdpa_ext.quantize_fp8_qkv(x, x, x)[4:6]):
        assert torch.equal(scales.cpu(), scale)
        assert torch.equal(codes.view(torch.uint8).cpu(), torch_codes(x, scale)[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape,width", [
    ((32, 4, 257, 80), 128),   # many heads a block holds: the block-per-head kernel writes the padding
    ((64, 8, 100, 80), 128),   # more short heads than 512-thread blocks fit at once: 256-thread blocks pad them
    ((1, 2, 70, 88), 128),     # few heads: the same kernel (not the clusters, which do not pad)
    ((1, 2, 50, 20), 32),      # 16-bit rows not in 16-byte vectors: codes one by one, the padding byte by byte
    ((2, 2, 2048, 96), 128),   # heads no block holds: the other kernels' codes, padded after them
    ((2, 3, 40, 64), 64),      # a width that pads nothing
])
def test_qkv_codes_width_pads_codes_with_zeros(device, dtype, shape, width):
    # codes_width: each row's codes followed by code 0 up to `width` dims, the same codes and scales as unpadded.
    gen = torch.Generator().manual_seed(shape[3])
    q, k, v = (torch.randn(shape, generator=gen).mul(3).to(dtype).to(device) for _ in range(3))
    k = k.transpose(1, 2).contiguous().transpose(1, 2)  # strided input
    v[0, 0].zero_()
    padded = sdpa_ext.quantize_fp8_qkv(q, k, v, codes_width=width)
    plain = sdpa_ext.quantize_fp8_qkv(q, k, v)
    for a, b in zip(padded[::2], plain[::2]):
        expected = torch.nn.functional.pad(b.view(torch.uint8), (0, width - shape[3]))
        assert a.dtype == torch.float8_e4m3fn and a.shape == (*shape[:3], width)
        assert torch.equal(a.view(torch.uint8), expected)
    for a, b in zip(padded[1::2], plain[1::2]):
        assert torch.equal(a, b)
    # k and v alone (for a q the kernel quantizes): the same bits as with q.
    for a, b in zip(sdpa_ext.quantize_fp8_kv(k, v, codes_width=width), padded[2:]):
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)


@pytest.mark.parametrize("width", [72, 132])
def test_qkv_codes_width_rejects_a_bad_width(device, width):
    q = torch.randn(1, 2, 8, 80, device=device)
    with pytest.raises(RuntimeError, match=rf"codes_width must be a multiple of 8 of at least the head dim \(80\), "
                                           rf"got {width}"):
        sdpa_ext.quantize_fp8_qkv(q, q, q, codes_width=width)
    with pytest.raises(RuntimeError, match=rf"codes_width must be a multiple of 8 of at least the head dim \(80\), "
                                           rf"got {width}"):
        sdpa_ext.quantize_fp8_kv(q, q, codes_width=width)
    with pytest.raises(ValueError, match="codes_width is not supported with smooth_k"):
        sdpa_ext.quantize_fp8_qkv(q, q, q, smooth_k=True, codes_width=128)


@pytest.mark.parametrize("smooth_k", [False, True])
def test_qkv_rejects_mixed_dtypes(device, smooth_k):
    q = torch.randn(1, 2, 8, 64, device=device)
    with pytest.raises(RuntimeError, match=r"k must have the dtype of q \(Float\), got Half"):
        sdpa_ext.quantize_fp8_qkv(q, q.half(), q, smooth_k=smooth_k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [
    (1, 8, 512, 64),    # one launch on CUDA: a cluster per head (sm_90) or a block per head
    (2, 4, 33, 128),    # odd row counts
    (1, 2, 4096, 128),  # heads too large for a cluster or shared memory: the two-pass kernels
    (8, 8, 256, 64),    # many small heads: a block per head
    (4, 16, 385, 128),  # clusters of as few blocks as hold a head (sm_90)
    (1, 2, 64, 256),    # 32 vectors a row in fp16 / bf16 (64 in fp32: the mean by torch)
    (1, 3, 50, 20),     # rows not in 16-byte vectors: the mean by torch on CUDA
    (1, 2, 64, 96),     # 12 vectors a row, not a power of two: the mean by torch on CUDA
])
def test_smooth_k_quantizes_keys_minus_their_mean(device, dtype, shape):
    gen = torch.Generator().manual_seed(shape[2])
    b, h, _, d = shape
    q, k, v = (torch.randn(shape, generator=gen) for _ in range(3))
    k = (k + torch.randn(b, h, 1, d, generator=gen) * 5).to(dtype).to(device)  # channel offsets of sd 5
    k = k.transpose(1, 2).contiguous().transpose(1, 2)  # strided, as models hand keys over
    k[0, 0].zero_()  # a head of zeros: mean 0, scale 1
    q, v = q.to(dtype).to(device), v.to(dtype).to(device)
    smoothed = sdpa_ext.quantize_fp8_qkv(q, k, v, smooth_k=True)
    plain = sdpa_ext.quantize_fp8_qkv(q, k, v)
    for ours, theirs in zip(smoothed[:2] + smoothed[4:6], plain[:2] + plain[4:6]):  # q and v as without smoothing
        assert same_bits(ours, theirs)
    shift = smoothed[6]
    assert shift.dtype == torch.float32 and shift.shape == (b, h, d)
    keys = k.double().cpu()
    # An fp32 sum of S values is within S * 2^-24 of the exact one relative to the sum of their magnitudes.
    tolerance = shape[2] * 2.0**-24 * keys.abs().mean(dim=2)
    assert ((shift.double().cpu() - keys.mean(dim=2)).abs() <= tolerance).all()
    # The contract, given the shift: k - m in fp32, scale amax / 448, codes torch's own cast.
    shifted = k.float().cpu() - shift.cpu()[:, :, None, :]
    scale = exact_scale(shifted)
    assert torch.equal(smoothed[3].cpu(), scale)
    assert_codes_match_torch(smoothed[2].view(torch.uint8), shifted, scale)
    again = sdpa_ext.quantize_fp8_qkv(q, k, v, smooth_k=True)
    assert all(same_bits(x, y) for x, y in zip(smoothed, again)), "the same bits on every call"
