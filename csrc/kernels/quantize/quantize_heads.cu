// The whole-head quantizer: one launch for q, k and v, a block per head that stages the head in shared memory, so
// each head is read from global memory once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fp8.h"
#include "../common/ptx.cuh"
#include "../dispatch/launch.h"
#include "channel_stats.cuh"
#include "encode.cuh"
#include "quantize_common.cuh"

namespace sdpa {
namespace {

using quantize::block_max;
using quantize::head_values;
using quantize::smooths;
using quantize::smoothing_stats_bytes;
using quantize::tensor_of;
using quantize::vector_amax;

constexpr int kHeadThreads = 512;

// Where the codes of head `head` start: rows of codes_row(p) codes.
__device__ __forceinline__ int codes_row(const QuantizeParams& p) { return max(p.cols, p.codes_cols); }
__device__ __forceinline__ uint8_t* head_codes(const QuantizeParams& p, int head) {
  return p.codes + static_cast<int64_t>(head) * p.rows * codes_row(p);
}

// Stores the codes of the kVec values that start at value `e` of a head (row-major, rows of p.cols) among the head's
// codes `codes`, in rows of codes_row(p) codes. `padded` rows of codes, longer than rows of values (codes_cols >
// cols), are a head dim zero-padded for the attention kernels, padded here (write_padding) so that no pass over the
// codes does it. Only this kernel takes padded codes, and not when it smooths (the drop-in pads smoothed values): in
// the streaming and cluster kernels (64 registers) the row and column pushed fp32, bf16 and smoothing builds into
// spills; in the two-pass encode, 32 -> 45 registers; here the smoothing fp32 build for sm_89, 4 bytes. One loop
// over vectors of codes instead, the padding's included (consecutive stores a warp), was slower: q, k and v of
// 32x16x257x80 fp16 padded to 128 took 52.3 us against 46.6, and unpadded 37.0 against 33.2 (H200, graph us).
template <int kVec, class Divisor>
__device__ __forceinline__ void store_head_codes(const QuantizeParams& p, uint8_t* codes, int e,
                                                 const float (&x)[kVec], const Divisor& divisor, bool padded) {
  if (padded) {
    const int row = e / p.cols;  // a head's values fit 32-bit indexing (the host checks)
    e += row * (p.codes_cols - p.cols);
  }
  store_codes<kVec>(codes + e, x, divisor);
}

// Code 0 in the padding of every row of a head's codes (codes_cols > cols), in 8-byte words where rows allow it
// (codes of 16-bit vectors).
template <int kThreads>
__device__ __forceinline__ void write_padding(const QuantizeParams& p, uint8_t* codes) {
  const int unit = (p.cols | p.codes_cols) % 8 == 0 ? 8 : 1;
  const int per_row = (p.codes_cols - p.cols) / unit;
  for (int j = threadIdx.x; j < p.rows * per_row; j += kThreads) {
    const int row = j / per_row;
    uint8_t* padding = codes + static_cast<int64_t>(row) * p.codes_cols + p.cols + (j - row * per_row) * unit;
    if (unit == 8) {
      *reinterpret_cast<uint2*>(padding) = make_uint2(0, 0);
    } else {
      *padding = 0;
    }
  }
}

// The whole-head kernel: one block per head of any of the tensors. Loads go through shared memory once, so the
// head is read from global memory a single time (the two-pass kernels read it twice).
template <typename T, int kVec, bool kSmooth, int kThreads>
__global__ void __launch_bounds__(kThreads, kSmooth ? 3 : 0) quantize_heads_kernel(const QuantizeHeadsParams b) {
  using Vec = typename std::conditional<kVec == 1, T, uint4>::type;  // kVec values of T per load
  allow_next_grid_launch();  // the attention kernel after it may start its blocks (it waits for this grid)
  extern __shared__ __align__(16) unsigned char head_smem[];
  T* values = reinterpret_cast<T*>(head_smem);
  const int t = tensor_of(b, blockIdx.x);
  const QuantizeParams& p = b.tensors[t];
  const int head = blockIdx.x - b.first_block[t];
  const T* x = head_values<T>(p, head);
  const int vecs_per_row = p.cols / kVec, vecs = p.rows * vecs_per_row;
  // kSmooth stages vector (row, c) at c ^ (row % vecs_per_row) of its row (vecs_per_row is a power of two there):
  // the statistics then read one column down 32 rows from 8 bank groups, not all from one.
  auto slot = [&](int i) {
    if constexpr (kSmooth) {
      const int row = i / vecs_per_row;
      return row * vecs_per_row + ((i % vecs_per_row) ^ (row % vecs_per_row));
    }
    return i;
  };

  float amax = 0.0f;
#pragma unroll 4
  for (int i = threadIdx.x; i < vecs; i += kThreads) {
    const int row = i / vecs_per_row, col = i % vecs_per_row * kVec;
    const Vec v = *reinterpret_cast<const Vec*>(x + row * p.x_row_stride + col * p.x_col_stride);
    reinterpret_cast<Vec*>(values)[slot(i)] = v;
    if constexpr (kVec == 1) {
      amax = fmaxf(amax, fabsf(to_float(v)));
    } else {
      amax = fmaxf(amax, vector_amax<T>(v));
    }
  }
  __shared__ float warp_max[kThreads / 32];
  amax = group_max<32>(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();  // also publishes the staged values
  __shared__ float head_scale;
  // Smoothing (p.shift): the totals [3][cols] and the shift [cols] after the staged head (stats_offset).
  const bool smooth = kSmooth && p.shift != nullptr;
  float* totals = reinterpret_cast<float*>(head_smem + b.stats_offset);
  float* shift = totals + 3 * p.cols;
  if (smooth) {
    // From the staged head: warp w takes the 4-byte columns w, w + 16, ... (a quarter of a vector's channels), its
    // lanes every 32nd row, so one warp holds a column's whole statistics. Per-warp partials of every column would
    // take shared memory that ViT-L's 577 x 64 heads need for three blocks per SM; quarter vectors keep the kernel
    // within three blocks' 40 registers (half vectors spilled) and give every warp work.
    constexpr int kChannels = kVec > 1 ? kVec / 4 : 1;  // (kVec is 1 only in instantiations that never smooth)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int quarter = warp; quarter < 4 * vecs_per_row; quarter += kThreads / 32) {
      ChannelStats<kChannels> stats;
      for (int row = lane; row < p.rows; row += 32) {
        const int vector = slot(row * vecs_per_row + quarter / 4);
        const uint32_t raw = reinterpret_cast<const uint32_t*>(values)[4 * vector + quarter % 4];
        const T* elems = reinterpret_cast<const T*>(&raw);
        float staged[kChannels];
#pragma unroll
        for (int e = 0; e < kChannels; ++e) staged[e] = to_float(elems[e]);
        stats.add(staged);
      }
      stats.reduce_lanes(1);
      stats.store_warp(totals, 1, p.cols, 0, lane, 1, quarter * kChannels);
    }
    __syncthreads();
    float channel_amax = 0.0f;
    for (int c = threadIdx.x; c < p.cols; c += kThreads) {
      channel_amax = fmaxf(channel_amax, ChannelTotal(totals + c, p.cols).smoothed_amax(p.rows, shift, c));
      p.shift[static_cast<int64_t>(head) * p.cols + c] = shift[c];
    }
    amax = block_max<kThreads>(channel_amax);
    if (threadIdx.x == 0) head_scale = p.scale[head] = scale_from_amax(amax);
  } else if (threadIdx.x < 32) {
    amax = group_max<32>(threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) {
      head_scale = p.given_scale != nullptr ? p.given_scale[head] : scale_from_amax(amax);
      p.scale[head] = head_scale;
    }
  }
  __syncthreads();
  const float scale = head_scale;
  // Every vector of this thread starts at the same column (vecs_per_row divides kThreads when smoothing); its
  // means are read from shared memory with each vector, as held in registers they took the kernel past three
  // blocks' 40.
  const float* offset = smooth ? shift + threadIdx.x % vecs_per_row * kVec : nullptr;
  uint8_t* codes = head_codes(p, head);
  const bool padded = !kSmooth && p.codes_cols > p.cols;
  for (int i = threadIdx.x; i < vecs; i += kThreads) {
    const Vec staged = reinterpret_cast<const Vec*>(values)[slot(i)];  // one load (see quantize_stream.cu)
    const T* elems = reinterpret_cast<const T*>(&staged);
    float x[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = to_float(elems[e]) - (smooth ? offset[e] : 0.0f);
    // The divisor built per vector: held across the loop, its reciprocal made the smoothing fp32 kernel spill 4
    // bytes at its 40 registers.
    store_head_codes<kVec>(p, codes, i * kVec, x, E4m3Divisor(scale, p.given_scale == nullptr), padded);
  }
  if (padded) write_padding<kThreads>(p, codes);
}

// Threads a block: 512, or 256 where heads of up to 32 KB outnumber the 512-thread blocks that the SMs hold at once
// (four an SM, by threads) and shared memory holds more than four: more heads then start at once (eight an SM on
// sm_90's 228 KB; an sm_89 SM's 100 KB holds three of ViT-B/16's 25 KB heads, so 256 threads would only halve each
// head's). H200, graph us, fp16, 3 rounds, 512 / 256 threads: k, v of 32x12x197x64 (ViT-B/16) 13.0-13.5 / 10.3, q,
// k, v 20.1-20.4 / 16.3, the drop-in `fast` 47.1-47.3 / 44.3-44.7 (cuDNN 25.9); k, v of 64x12x197x64 27.0-27.3 /
// 20.9-21.0, 32x16x256x64 18.1-18.2 / 17.6-17.7. Larger heads lose with 256 (k, v of 8x16x512x64 9.0 / 10.5,
// 16x16x257x128 19.3 / 22.9, 32x16x577x64 39.0 / 43.1), as do few heads (q, k, v of 2x8x256x64 3.4 / 3.95); 128
// threads were slower than 256 at every shape (ViT-B/16's k, v 10.6).
bool short_head_blocks(const QuantizeHeadsParams& b, const cudaDeviceProp& device) {
  constexpr int kBlocksByThreads = 2048 / kHeadThreads;
  const int64_t head_bytes = quantize_heads_smem_bytes(b);
  const int64_t heads = b.first_block[b.count];
  const int64_t blocks_by_smem = device.sharedMemPerMultiprocessor / (head_bytes + device.reservedSharedMemPerBlock);
  return head_bytes <= 32 * 1024 && blocks_by_smem > kBlocksByThreads &&
         heads > kBlocksByThreads * static_cast<int64_t>(device.multiProcessorCount);
}

template <typename T>
cudaError_t launch_heads_typed(const QuantizeHeadsParams& b, const cudaDeviceProp& device, cudaStream_t stream) {
  const int smem = static_cast<int>(quantize_heads_smem_bytes(b));
  const unsigned blocks = static_cast<unsigned>(b.first_block[b.count]);
  auto launch = [&](auto kernel, int threads) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        err != cudaSuccess) {
      return err;
    }
    kernel<<<blocks, threads, smem, stream>>>(b);
    return cudaGetLastError();
  };
  auto launch_plain = [&](auto threads) {
    constexpr int kThreads = decltype(threads)::value;
    if (b.vectorized) return launch(quantize_heads_kernel<T, 16 / sizeof(T), false, kThreads>, kThreads);
    return launch(quantize_heads_kernel<T, 1, false, kThreads>, kThreads);
  };
  if (smooths(b)) {  // vectorized (smoothable_row)
    return launch(quantize_heads_kernel<T, 16 / sizeof(T), true, kHeadThreads>, kHeadThreads);
  }
  if (short_head_blocks(b, device)) return launch_plain(std::integral_constant<int, kHeadThreads / 2>());
  return launch_plain(std::integral_constant<int, kHeadThreads>());
}

// The whole-head kernel's staged values: the largest head, rounded up to 16 bytes (the statistics follow).
int64_t quantize_heads_values_bytes(const QuantizeHeadsParams& b) {
  int64_t bytes = 0;
  for (int t = 0; t < b.count; ++t) {
    const int64_t element = b.tensors[t].x_type == InputType::kFloat32 ? 4 : 2;
    bytes = std::max(bytes, element * b.tensors[t].rows * b.tensors[t].cols);
  }
  return (bytes + 15) / 16 * 16;
}

}  // namespace

int64_t quantize_heads_smem_bytes(const QuantizeHeadsParams& b) {
  return quantize_heads_values_bytes(b) + smoothing_stats_bytes(b, 0);  // the totals and the shift
}

cudaError_t launch_quantize_heads(const QuantizeHeadsParams& b, const cudaDeviceProp& device, cudaStream_t stream) {
  QuantizeHeadsParams params = b;
  params.stats_offset = static_cast<int>(quantize_heads_values_bytes(b));
  return with_input_type(params.tensors[0].x_type,
                         [&](auto value) { return launch_heads_typed<decltype(value)>(params, device, stream); });
}

}  // namespace sdpa
