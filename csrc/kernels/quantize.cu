// Per-head E4M3 quantization: an amax pass and an encode pass, `chunks` blocks per head each.
//
// Pass 1 writes one partial amax per block; pass 2 reduces its head's partials (at most kMaxChunks, one warp),
// derives scale = amax / 448 exactly as torch does, and encodes its slice. No atomics and no memset, so the
// result is deterministic and two launches capture cleanly in a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "attention_common.cuh"
#include "fp8.h"
#include "launch.h"

namespace sdpa {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kMaxChunks = 64;
constexpr int kElementsPerThread = 8;  // aim for at least this much work per thread before adding blocks

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// The rows of one head that block (head, chunk) covers, and how to address them.
struct Slice {
  int head, chunk, row_begin, elements;
  int64_t x_offset;  // of the head's first element
};

__device__ __forceinline__ Slice block_slice(const QuantizeParams& p) {
  Slice s;
  s.head = blockIdx.x / p.chunks;
  s.chunk = blockIdx.x % p.chunks;
  const int rows_per_chunk = (p.rows + p.chunks - 1) / p.chunks;
  s.row_begin = min(p.rows, s.chunk * rows_per_chunk);
  s.elements = (min(p.rows, s.row_begin + rows_per_chunk) - s.row_begin) * p.cols;
  s.x_offset = (s.head / p.heads) * p.x_batch_stride + (s.head % p.heads) * p.x_head_stride;
  return s;
}

template <typename T>
__device__ __forceinline__ float load_element(const QuantizeParams& p, const Slice& s, int i, int* row, int* col) {
  *row = s.row_begin + i / p.cols;
  *col = i % p.cols;
  return to_float(static_cast<const T*>(p.x)[s.x_offset + *row * p.x_row_stride + *col * p.x_col_stride]);
}

__device__ __forceinline__ float block_max(float x) {
  __shared__ float warp_max[kQuantThreads / 32];
  x = group_max<32>(x);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = x;
  __syncthreads();
  x = threadIdx.x < kQuantThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
  return group_max<32>(x);  // valid in warp 0
}

template <typename T>
__global__ void __launch_bounds__(kQuantThreads) amax_kernel(const QuantizeParams p) {
  const Slice s = block_slice(p);
  float amax = 0.0f;
  int row, col;
  for (int i = threadIdx.x; i < s.elements; i += kQuantThreads) amax = fmaxf(amax, fabsf(load_element<T>(p, s, i, &row, &col)));
  amax = block_max(amax);
  if (threadIdx.x == 0) p.partial_amax[blockIdx.x] = amax;
}

template <typename T>
__global__ void __launch_bounds__(kQuantThreads) encode_kernel(const QuantizeParams p) {
  const Slice s = block_slice(p);
  __shared__ float head_scale;
  if (threadIdx.x < 32) {
    float amax = 0.0f;
    if (p.given_scale == nullptr) {
      for (int i = threadIdx.x; i < p.chunks; i += 32) amax = fmaxf(amax, p.partial_amax[s.head * p.chunks + i]);
      amax = group_max<32>(amax);
    }
    if (threadIdx.x == 0) head_scale = p.given_scale != nullptr ? p.given_scale[s.head] : scale_from_amax(amax);
  }
  __syncthreads();
  const float scale = head_scale;
  if (s.chunk == 0 && threadIdx.x == 0) p.scale[s.head] = scale;

  uint8_t* codes = p.codes + static_cast<int64_t>(s.head) * p.rows * p.cols;
  int row, col;
  for (int i = threadIdx.x; i < s.elements; i += kQuantThreads) {
    const float x = load_element<T>(p, s, i, &row, &col);
    codes[static_cast<int64_t>(row) * p.cols + col] = quantize_e4m3(x, scale);
  }
}

template <typename T>
cudaError_t launch_typed(const QuantizeParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads * p.chunks);
  if (p.given_scale == nullptr) {
    amax_kernel<T><<<blocks, kQuantThreads, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  encode_kernel<T><<<blocks, kQuantThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int quantize_chunks(const QuantizeParams& p) {
  const int64_t per_head = static_cast<int64_t>(p.rows) * p.cols;
  const int64_t wanted = (per_head + kQuantThreads * kElementsPerThread - 1) / (kQuantThreads * kElementsPerThread);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, kMaxChunks, p.rows})));
}

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  switch (p.x_type) {
    case InputType::kFloat32:
      return launch_typed<float>(p, stream);
    case InputType::kFloat16:
      return launch_typed<__half>(p, stream);
    case InputType::kBFloat16:
      return launch_typed<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sdpa
