// CUDA host side of sdpa::quantize_fp8 (two kernels: amax, encode) and sdpa::quantize_fp8_qkv (one launch).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

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
  p.scale = scales.data_ptr<float>();
  p.given_scale = given.defined() ? given.data_ptr<float>() : nullptr;
  p.chunks = quantize_chunks(p);
  p.vectorized = rows_are_vectorizable(x);
  return p;
}

std::tuple<at::Tensor, at::Tensor> allocate_quantized(const at::Tensor& x) {
  return {at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn)),
          at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat))};
}

// The two-pass kernels (any head size): amax partials per chunk, then encode.
void quantize_two_pass(const QuantizeParams& params, const at::Tensor& x, cudaStream_t stream) {
  QuantizeParams p = params;
  at::Tensor partial_amax;
  if (p.given_scale == nullptr) {
    partial_amax = at::empty({x.size(0) * x.size(1) * p.chunks}, x.options().dtype(at::kFloat));
    p.partial_amax = partial_amax.data_ptr<float>();
  }
  const cudaError_t err = launch_quantize(p, stream);
  TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8: kernel launch failed: ", cudaGetErrorString(err));
}

std::tuple<at::Tensor, at::Tensor> quantize_fp8_cuda(const at::Tensor& x, const std::optional<at::Tensor>& scale) {
  check_quantize_inputs(x, scale);
  const c10::cuda::CUDAGuard guard(x.device());
  auto [codes, scales] = allocate_quantized(x);
  const at::Tensor given = scale.has_value() ? scale->contiguous() : at::Tensor();
  quantize_two_pass(make_quantize_params(x, codes, scales, given), x, at::cuda::getCurrentCUDAStream());
  return {codes, scales};
}

// q, k and v in one launch when each head fits a cluster's registers (sm_90) or a block's shared memory (the case
// that matters for small shapes, where launches dominate: 6 launches took 21.7 us at 1x8x512x64 on an H200);
// otherwise two passes each. Clusters (16 blocks a head) pay where the heads are few; where they fill the GPU, a
// block a head does. Graph us per call on an H100 (2026-11-24), cluster against a block a head: 4.1 / 6.9 at
// 1x8x512x64 (24 heads), 7.4 / 4.5 at 2x8x256x64 (48 heads), 157.3 / 30.9 at 32x12x197x64 and 264.7 / 80.1 at
// 32x16x577x64 (ViT-B and ViT-L sizes, 1152 and 1536 heads); at 4x16x2048x64 a head outgrows a block's shared
// memory, and clusters took 59.8 against 78.6 for two passes.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_fp8_qkv_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_quantize_qkv_inputs(q, k, v);
  const at::Tensor inputs[3] = {q, k, v};
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Tensor codes[3], scales[3];
  QuantizeHeadsParams batch{};
  batch.count = 3;
  batch.vectorized = true;
  for (int t = 0; t < 3; ++t) {
    std::tie(codes[t], scales[t]) = allocate_quantized(inputs[t]);
    batch.tensors[t] = make_quantize_params(inputs[t], codes[t], scales[t], at::Tensor());
    batch.first_block[t + 1] = batch.first_block[t] + batch.tensors[t].batch * batch.tensors[t].heads;
    batch.vectorized = batch.vectorized && batch.tensors[t].vectorized;
  }
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(q.device().index());
  const bool block_holds_head = quantize_heads_smem_bytes(batch) <= props->sharedMemPerBlockOptin - 1024;
  const bool few_heads = static_cast<int64_t>(batch.first_block[batch.count]) * 4 <= props->multiProcessorCount;
  const bool by_cluster =
      (few_heads || !block_holds_head) && quantize_heads_by_cluster(batch, 10 * props->major + props->minor);
  if (by_cluster || block_holds_head) {
    const cudaError_t err =
        by_cluster ? launch_quantize_heads_cluster(batch, stream) : launch_quantize_heads(batch, stream);
    TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8_qkv: kernel launch failed: ", cudaGetErrorString(err));
  } else {
    for (int t = 0; t < 3; ++t) quantize_two_pass(batch.tensors[t], inputs[t], stream);
  }
  return {codes[0], scales[0], codes[1], scales[1], codes[2], scales[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CUDA, m) {
  m.impl("quantize_fp8", &quantize_fp8_cuda);
  m.impl("quantize_fp8_qkv", &quantize_fp8_qkv_cuda);
}

}  // namespace sdpa
