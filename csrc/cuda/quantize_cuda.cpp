// CUDA host side of sdpa::quantize_fp8 and sdpa::quantize_fp8_qkv: one launch where heads fit on chip, else two
// kernels (amax, encode) per tensor.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../checks.h"
#include "../kernels/dispatch/launch.h"
#include "input_types.h"

namespace sdpa {
namespace {

// 16-byte loads work when rows are contiguous and every row starts 16-byte aligned.
bool rows_are_vectorizable(const at::Tensor& x) {
  const int64_t per_vector = 16 / x.element_size();
  return x.stride(3) == 1 && x.size(3) % per_vector == 0 && x.stride(2) % per_vector == 0 &&
         x.stride(1) % per_vector == 0 && x.stride(0) % per_vector == 0 &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// Params for one tensor; the caller allocates codes (contiguous) and scales ([B, H] float32).
QuantizeParams make_quantize_params(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                                    const at::Tensor& given) {
  TORCH_CHECK(x.size(2) * x.size(3) <= INT_MAX && x.size(0) * x.size(1) <= INT_MAX,
              "x: a head (S * D) and B * H must fit 32-bit indexing, got shape ", x.sizes());
  QuantizeParams p{};
  p.x = x.data_ptr();
  p.x_type = input_type(x.scalar_type());
  p.x_batch_stride = x.stride(0), p.x_head_stride = x.stride(1), p.x_row_stride = x.stride(2);
  p.x_col_stride = x.stride(3);
  p.batch = static_cast<int>(x.size(0));
  p.heads = static_cast<int>(x.size(1));
  p.rows = static_cast<int>(x.size(2));
  p.cols = static_cast<int>(x.size(3));
  p.codes = static_cast<uint8_t*>(codes.data_ptr());
  p.codes_cols = static_cast<int>(codes.size(3));
  p.scale = scales.data_ptr<float>();
  p.given_scale = given.defined() ? given.data_ptr<float>() : nullptr;
  p.chunks = quantize_chunks(p, at::cuda::getDeviceProperties(x.device().index())->multiProcessorCount);
  p.vectorized = rows_are_vectorizable(x);
  return p;
}

// Codes [B, H, S, codes_width] (D where codes_width is 0) and scales [B, H].
std::tuple<at::Tensor, at::Tensor> allocate_quantized(const at::Tensor& x, int64_t codes_width = 0) {
  return {at::empty({x.size(0), x.size(1), x.size(2), std::max(codes_width, x.size(3))},
                    x.options().dtype(at::kFloat8_e4m3fn)),
          at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat))};
}

// The two-pass kernels (any head size): amax partials per chunk, then encode.
void quantize_two_pass(const QuantizeParams& params, const at::Tensor& x, cudaStream_t stream) {
  QuantizeParams p = params;
  at::Tensor partial_amax, partial_stats;
  if (p.given_scale == nullptr) {
    partial_amax = at::empty({x.size(0) * x.size(1) * p.chunks}, x.options().dtype(at::kFloat));
    p.partial_amax = partial_amax.data_ptr<float>();
  }
  if (p.shift != nullptr) {
    partial_stats = at::empty({x.size(0) * x.size(1) * p.chunks * 3 * p.cols}, x.options().dtype(at::kFloat));
    p.partial_stats = partial_stats.data_ptr<float>();
  }
  const cudaError_t err = launch_quantize(p, stream);
  TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8: kernel launch failed: ", cudaGetErrorString(err));
}

// `count` tensors of one dtype, quantized per head into codes and scales (allocated here). One launch when each head
// fits a cluster's registers (sm_90) or a block's shared memory (the case that matters for small shapes, where
// launches dominate: 6 launches took 21.7 us for q, k and v at 1x8x512x64 on an H200); otherwise two passes each.
// Which one-launch kernel, by graph us per call for q, k and v on an H100 (2026-11-24):
// - heads fewer than a quarter of the SMs: clusters of 16 blocks a head (1x8x512x64, 24 heads: 4.1 against 6.9 for
//   a block a head); against 8 blocks (H200, 2026-11-29, graph us, 3 rounds; equal outputs at 1x8x512x64):
//   1x8x512x64 3.30-3.35 / 3.19, 1x4x512x128 3.36-3.39 / 3.44-3.51, 1x8x1024x64 3.75-3.85 / 4.29-4.35, 1x8x2048x64
//   4.69-4.78 / 6.55-6.61, 1x8x1024x128 4.66-4.74 / 6.54-6.55: shares of ~8 KB run fastest, so 8 blocks would gain
//   only at heads of 64 KB (0.12 us at the mission shape);
// - more heads, while three blocks holding a head fit an SM: a block a head, against 16-block clusters and clusters
//   of as few blocks as hold a head: 2x8x256x64 4.5 / 7.4 / 6.5, 8x16x512x64 19.0 / - / 24.3, 32x12x197x64
//   30.8 / 157.3 / 31.6, 32x16x577x64 79.9 / 264.7 / 109.8, 32x16x257x128 69.9 / 249.1 / 103.1;
// - larger heads: clusters of as few blocks as hold one, against a block a head or 16-block clusters: 4x16x768x128
//   40.1 / 49.1, 16x16x512x128 95.2 / 107.7, 4x16x2048x64 52.7 / 58.8 (16-block clusters; no block holds it);
//   where heads up to 1 MB do not smooth, the streaming clusters instead (launched once, a head per cluster at a
//   time): 4x16x2048x128 87.9 against 97.6 us, 4x32x2048x128 154.4 / 189.2, 4x16x2048x64 48.3 / 52.5 (H100, one run
//   each, both encoding by one reciprocal as 1a5c886 did; 81.1, 143.5 and 45.1 us with today's encode.cuh).
// With `shift` defined ([B, H, D] float32), inputs[smoothed] is quantized minus its per-channel mean, written there;
// the caller checks smoothable_width first.
// With codes_width > D the codes come zero-padded to codes_width dims (quantize_fp8_qkv's codes_width): written so
// by the block-per-head kernel where a block holds a head (only it reads QuantizeParams::codes_cols), else padded
// after the other kernels.
void quantize_heads_of(const at::Tensor* inputs, int count, at::Tensor* codes, at::Tensor* scales,
                       int smoothed = -1, const at::Tensor& shift = at::Tensor(), int64_t codes_width = 0) {
  const c10::cuda::CUDAGuard guard(inputs[0].device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  QuantizeHeadsParams batch{};
  batch.count = count;
  batch.vectorized = true;
  for (int t = 0; t < count; ++t) {
    std::tie(codes[t], scales[t]) = allocate_quantized(inputs[t], codes_width);
    batch.tensors[t] = make_quantize_params(inputs[t], codes[t], scales[t], at::Tensor());
    if (t == smoothed) batch.tensors[t].shift = shift.data_ptr<float>();
    batch.first_block[t + 1] = batch.first_block[t] + batch.tensors[t].batch * batch.tensors[t].heads;
    batch.vectorized = batch.vectorized && batch.tensors[t].vectorized;
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(inputs[0].device().index());
  const int64_t head_bytes = quantize_heads_smem_bytes(batch);
  const bool block_holds_head = head_bytes <= props->sharedMemPerBlockOptin - 1024;
  if (std::any_of(inputs, inputs + count, [&](const at::Tensor& x) { return x.size(3) < codes_width; })) {
    if (block_holds_head) {
      const cudaError_t err = launch_quantize_heads(batch, *props, stream);
      TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8: kernel launch failed: ", cudaGetErrorString(err));
      return;
    }
    at::Tensor unpadded[3];
    quantize_heads_of(inputs, count, unpadded, scales);
    for (int t = 0; t < count; ++t) {
      const int64_t cols = inputs[t].size(3);
      at::Tensor bytes = codes[t].view(at::kByte);
      bytes.narrow(3, 0, cols).copy_(unpadded[t].view(at::kByte));
      bytes.narrow(3, cols, codes_width - cols).zero_();
    }
    return;
  }
  const bool few_heads = static_cast<int64_t>(batch.first_block[batch.count]) * 4 <= props->multiProcessorCount;
  const bool block_per_head = !few_heads && 3 * head_bytes <= static_cast<int64_t>(props->sharedMemPerMultiprocessor);
  const int sm = 10 * props->major + props->minor;
  const bool by_stream = !block_per_head && !few_heads && quantize_heads_by_stream(batch, sm);
  const bool by_cluster = !block_per_head && !by_stream && quantize_heads_by_cluster(batch, sm);
  if (by_stream || by_cluster || block_holds_head) {
    const cudaError_t err = by_stream    ? launch_quantize_heads_stream(batch, stream)
                            : by_cluster ? launch_quantize_heads_cluster(batch, /*fewest_blocks=*/!few_heads, stream)
                                         : launch_quantize_heads(batch, *props, stream);
    TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8: kernel launch failed: ", cudaGetErrorString(err));
  } else {
    for (int t = 0; t < count; ++t) quantize_two_pass(batch.tensors[t], inputs[t], stream);
  }
}

// One tensor takes the same kernels as three (graph us against two passes, H100, one run: q of 1x8x512x64 3.8 / 4.5,
// 4x16x2048x64 16.3 / 25.8, 32x16x577x64 33.1 / 57.0, 4x32x2048x128 67.5 / 77.1). Given scales need no amax: the
// encode pass alone reads x once.
std::tuple<at::Tensor, at::Tensor> quantize_fp8_cuda(const at::Tensor& x, const std::optional<at::Tensor>& scale) {
  check_quantize_inputs(x, scale);
  at::Tensor codes, scales;
  if (!scale.has_value()) {
    quantize_heads_of(&x, 1, &codes, &scales);
    return {codes, scales};
  }
  const c10::cuda::CUDAGuard guard(x.device());
  std::tie(codes, scales) = allocate_quantized(x);
  quantize_two_pass(make_quantize_params(x, codes, scales, scale->contiguous()), x, at::cuda::getCurrentCUDAStream());
  return {codes, scales};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_fp8_qkv_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::optional<int64_t> codes_width) {
  check_quantize_qkv_inputs(q, k, v, codes_width);
  const at::Tensor inputs[3] = {q, k, v};
  at::Tensor codes[3], scales[3];
  quantize_heads_of(inputs, 3, codes, scales, -1, at::Tensor(), codes_width.value_or(0));
  return {codes[0], scales[0], codes[1], scales[1], codes[2], scales[2]};
}

// k and v without q, for a q that the attention kernel quantizes itself (fp8_forward's q_quantization).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_fp8_kv_cuda(const at::Tensor& k,
                                                                                const at::Tensor& v,
                                                                                std::optional<int64_t> codes_width) {
  check_quantize_kv_inputs(k, v, codes_width);
  const at::Tensor inputs[2] = {k, v};
  at::Tensor codes[2], scales[2];
  quantize_heads_of(inputs, 2, codes, scales, -1, at::Tensor(), codes_width.value_or(0));
  return {codes[0], scales[0], codes[1], scales[1]};
}

// Whether the kernels smooth rows as long as x's: a power of two up to 32 16-byte vectors (smoothable_row).
bool smoothable_width(const at::Tensor& x) {
  const int64_t bytes = x.size(3) * x.element_size();
  return bytes % 16 == 0 && smoothable_row(static_cast<int>(bytes / 16));
}

// k's per-channel mean comes out of the passes that take its amax, so smoothing reads k no more often.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
quantize_fp8_qkv_smooth_k_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_quantize_qkv_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor shift = at::empty({k.size(0), k.size(1), k.size(3)}, k.options().dtype(at::kFloat));
  at::Tensor codes[3], scales[3];
  if (smoothable_width(k)) {
    // Keys in strided or misaligned rows are copied once: the kernels' channel groups need whole 16-byte vectors.
    const at::Tensor keys = rows_are_vectorizable(k) ? k : k.clone(at::MemoryFormat::Contiguous);
    const at::Tensor inputs[3] = {q, keys, v};
    quantize_heads_of(inputs, 3, codes, scales, /*smoothed=*/1, shift);
  } else {
    // Other head dims: the mean by torch, then k - mean quantized as float32 values.
    shift.copy_(k.to(at::kFloat).mean(2));
    const at::Tensor shifted = k.to(at::kFloat) - shift.unsqueeze(2);
    quantize_heads_of(&q, 1, &codes[0], &scales[0]);
    quantize_heads_of(&shifted, 1, &codes[1], &scales[1]);
    quantize_heads_of(&v, 1, &codes[2], &scales[2]);
  }
  return {codes[0], scales[0], codes[1], scales[1], codes[2], scales[2], shift};
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CUDA, m) {
  m.impl("quantize_fp8", &quantize_fp8_cuda);
  m.impl("quantize_fp8_qkv", &quantize_fp8_qkv_cuda);
  m.impl("quantize_fp8_kv", &quantize_fp8_kv_cuda);
  m.impl("quantize_fp8_qkv_smooth_k", &quantize_fp8_qkv_smooth_k_cuda);
}

}  // namespace sdpa
