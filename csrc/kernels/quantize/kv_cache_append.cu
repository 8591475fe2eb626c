// New K and V rows encoded straight into preallocated E4M3 caches (sdpa::kv_cache_append): one launch for both, one
// thread per vector of consecutive values, the scales (and the key shift) fixed by the caller. A decode step appends
// one row per (batch, kv head), so the launch is small and its cost is the launch itself.
#include "../common/params.h"
#include "../dispatch/launch.h"
#include "encode.cuh"

namespace sdpa {
namespace {

constexpr int kAppendThreads = 256;

// One (tensor, batch, head, row, vector) per thread: the vectors of a row are consecutive threads, K before V.
template <typename T, int kVec>
__global__ void __launch_bounds__(kAppendThreads) kv_cache_append_kernel(const KvAppendParams p) {
  const int vectors_per_row = p.head_dim / kVec;
  const int64_t per_tensor = static_cast<int64_t>(p.batch) * p.heads * p.rows * vectors_per_row;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kAppendThreads + threadIdx.x;
  if (i >= 2 * per_tensor) return;
  const bool is_k = i < per_tensor;
  const int64_t j = is_k ? i : i - per_tensor;
  const int col = static_cast<int>(j % vectors_per_row) * kVec;
  const int64_t row_index = j / vectors_per_row;  // over [B, H, rows]
  const int row = static_cast<int>(row_index % p.rows);
  const int head = static_cast<int>(row_index / p.rows % p.heads);
  const int batch = static_cast<int>(row_index / p.rows / p.heads);
  const int position = p.start[batch] + row;
  if (position < 0 || position >= p.capacity) return;  // outside the cache: dropped

  const T* src = static_cast<const T*>(is_k ? p.k : p.v) +
                 (is_k ? batch * p.k_batch_stride + head * p.k_head_stride + row * p.k_row_stride
                       : batch * p.v_batch_stride + head * p.v_head_stride + row * p.v_row_stride) +
                 col;
  float x[kVec];
  load_values<T, kVec>(src, x);
  const int scale_index = batch * p.heads + head;
  if (is_k && p.k_shift != nullptr) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] -= p.k_shift[static_cast<int64_t>(scale_index) * p.head_dim + col + e];
  }
  uint8_t* dst = is_k ? p.k_cache + batch * p.kc_batch_stride + head * p.kc_head_stride + position * p.kc_row_stride
                      : p.v_cache + batch * p.vc_batch_stride + head * p.vc_head_stride + position * p.vc_row_stride;
  // Fixed scales, under which later rows may saturate: divided (a row per call).
  store_codes<kVec>(dst + col, x, E4m3Divisor(is_k ? p.k_scale[scale_index] : p.v_scale[scale_index], false));
}

template <typename T>
bool vectorizable(const KvAppendParams& p) {
  constexpr int kVec = 16 / sizeof(T);
  auto aligned = [](const void* base, int64_t alignment, int64_t b, int64_t h, int64_t r, int64_t element_bytes) {
    return reinterpret_cast<uintptr_t>(base) % alignment == 0 && (b * element_bytes) % alignment == 0 &&
           (h * element_bytes) % alignment == 0 && (r * element_bytes) % alignment == 0;
  };
  return p.head_dim % kVec == 0 && aligned(p.k, 16, p.k_batch_stride, p.k_head_stride, p.k_row_stride, sizeof(T)) &&
         aligned(p.v, 16, p.v_batch_stride, p.v_head_stride, p.v_row_stride, sizeof(T)) &&
         aligned(p.k_cache, kVec, p.kc_batch_stride, p.kc_head_stride, p.kc_row_stride, 1) &&
         aligned(p.v_cache, kVec, p.vc_batch_stride, p.vc_head_stride, p.vc_row_stride, 1);
}

template <typename T, int kVec>
cudaError_t launch_append(const KvAppendParams& p, cudaStream_t stream) {
  const int64_t threads = 2 * static_cast<int64_t>(p.batch) * p.heads * p.rows * (p.head_dim / kVec);
  const unsigned blocks = static_cast<unsigned>((threads + kAppendThreads - 1) / kAppendThreads);
  kv_cache_append_kernel<T, kVec><<<blocks, kAppendThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_kv_cache_append(const KvAppendParams& p, cudaStream_t stream) {
  return with_input_type(p.type, [&](auto value) {
    using T = decltype(value);
    return vectorizable<T>(p) ? launch_append<T, 16 / sizeof(T)>(p, stream) : launch_append<T, 1>(p, stream);
  });
}

}  // namespace sdpa
