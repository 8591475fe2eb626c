// Per-head E4M3 quantization: an amax pass and an encode pass, `chunks` blocks per head each.
//
// Pass 1 writes one partial amax per block; pass 2 reduces its head's partials (one warp),
// derives scale = amax / 448 exactly as torch does, and encodes its slice. Smoothing (QuantizeParams::shift) writes
// per-channel partials instead, which a per-head kernel between the passes turns into the shift and the scale. No atomics and no memset, so the
// result is deterministic and two launches capture cleanly in a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

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
using quantize::head_offset;
using quantize::kQuantThreads;

constexpr int kMaxChunks = 64;
constexpr int kElementsPerThread = 8;  // aim for at least this much work per thread before adding blocks
// Where the heads are too few for kMaxChunks blocks each to give every SM kFillBlocksPerSm blocks, up to
// kMaxFewHeadChunks a head instead. H200, graph us for q, k and v of 1x2x8192x128 (2 heads a tensor, 128 blocks a
// pass before): 35.5 -> 26.3 with 256 chunks a head. Not for every head: every encode block reduces its head's
// partial maxima, and 256 chunks a head took 4x16x2048x256 from 182 to 311 us (2026-11-26).
constexpr int kFillBlocksPerSm = 4;
constexpr int kMaxFewHeadChunks = 512;

// The rows of one head that block (head, chunk) covers, in vectors of kVec elements, and how to address them.
template <int kVec>
struct Slice {
  int head, chunk, row_begin, vectors, vectors_per_row;
  int64_t x_offset;  // of the head's first element

  __device__ explicit Slice(const QuantizeParams& p) {
    head = blockIdx.x / p.chunks;
    chunk = blockIdx.x % p.chunks;
    const int rows_per_chunk = (p.rows + p.chunks - 1) / p.chunks;
    row_begin = min(p.rows, chunk * rows_per_chunk);
    vectors_per_row = p.cols / kVec;
    vectors = (min(p.rows, row_begin + rows_per_chunk) - row_begin) * vectors_per_row;
    x_offset = head_offset(p, head);
  }
  __device__ int row(int i) const { return row_begin + i / vectors_per_row; }
  __device__ int col(int i) const { return i % vectors_per_row * kVec; }
  template <typename T>
  __device__ void load(const QuantizeParams& p, int i, float (&x)[kVec]) const {
    load_values<T, kVec>(static_cast<const T*>(p.x) + x_offset + row(i) * p.x_row_stride + col(i) * p.x_col_stride, x);
  }
};

// This thread's vectors of a slice in order (i = threadIdx.x, + kQuantThreads, ...): where a row's vectors divide the
// block's threads, each is `step` values after the one before, one add in place of Slice::load's row and column (an
// integer division and two 64-bit multiplies a vector). quantize_fp8_qkv, graph us, H100, two builds timed in turn,
// three rounds each, before / after: fp16 1x16x8192x128 100.6 / 91.2 (two reads and one write at 3.35 TB/s: 75.1),
// 1x16x16384x64 100.5 / 91.0, 1x32x8192x128 197.0 / 189.4, bf16 1x16x8192x128 100.8 / 91.9. (One launch a pass for
// q, k and v together instead of one a tensor, standalone: 1x16x8192x128 96.7 against 97.1, but 14.3 against 19.9 at
// 1x2x8192x128; a tensor's encode pass rereads what its amax pass just read, through L2, where three tensors at once
// overflow it.)
template <typename T, int kVec>
struct ThreadVectors {
  const T* at;    // the thread's next vector, where stepped
  int64_t step;   // values between the thread's vectors; 0 where not stepped
  bool stepped;   // a row's vectors divide the block's threads

  __device__ ThreadVectors(const QuantizeParams& p, const Slice<kVec>& s) {
    const int i = threadIdx.x;
    at = static_cast<const T*>(p.x) + s.x_offset + s.row(i) * p.x_row_stride + s.col(i) * p.x_col_stride;
    stepped = quantize::steps_whole_rows(s.vectors_per_row);
    step = quantize::row_step(s.vectors_per_row, p.x_row_stride);
  }
  // Vector i of the slice, the thread's next one; the loop then advance()s, unconditionally: advanced only where
  // stepped, the kernels kept half the gain (1x16x8192x128 94.6 us).
  __device__ void load(const QuantizeParams& p, const Slice<kVec>& s, int i, float (&x)[kVec]) const {
    if (stepped) {
      load_values<T, kVec>(at, x);
    } else {
      s.template load<T>(p, i, x);
    }
  }
  __device__ void advance() { at += step; }
};

// The largest cols a smoothing block handles: 32 vectors of kVec (256 values of fp16 / bf16, 128 of fp32).
constexpr int kMaxSmoothCols = 32 * 8;

// kSmooth (p.shift set, vectorized rows): each block writes its chunk's per-channel totals instead of an amax.
template <typename T, int kVec, bool kSmooth>
__global__ void __launch_bounds__(kQuantThreads) amax_kernel(const QuantizeParams p) {
  const Slice<kVec> s(p);
  float amax = 0.0f;
  ChannelStats<kVec> stats;  // every vector of this thread starts at column threadIdx.x % vectors_per_row
  ThreadVectors<T, kVec> vectors(p, s);
  for (int i = threadIdx.x; i < s.vectors; i += kQuantThreads, vectors.advance()) {
    float x[kVec];
    vectors.load(p, s, i, x);
    if constexpr (kSmooth) stats.add(x);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(x[e]));
  }
  if constexpr (kSmooth) {
    __shared__ float block_stats[channel_stats_floats(kQuantThreads / 32, kMaxSmoothCols)];
    stats.reduce_lanes(s.vectors_per_row);
    stats.store_warp(block_stats, kQuantThreads / 32, p.cols, threadIdx.x / 32, threadIdx.x % 32, s.vectors_per_row,
                     s.col(threadIdx.x));
    __syncthreads();
    const float* totals = total_channel_stats(block_stats, kQuantThreads / 32, p.cols);
    __syncthreads();
    float* partial = p.partial_stats + static_cast<int64_t>(blockIdx.x) * 3 * p.cols;
    for (int c = threadIdx.x; c < 3 * p.cols; c += kQuantThreads) partial[c] = totals[c];
  } else {
    amax = block_max(amax);
    if (threadIdx.x == 0) p.partial_amax[blockIdx.x] = amax;
  }
}

// Smoothing's middle pass, a block per head: adds up the chunks' per-channel totals in chunk order and writes the
// head's shift and scale, which the encode pass then reads (every encode block reducing the partials itself read
// them 64 times over from L2: 46.5 against 21 us for k's encode at 1x16x8192x128, H100).
__global__ void __launch_bounds__(kQuantThreads) smooth_head_kernel(const QuantizeParams p) {
  const int head = blockIdx.x;
  __shared__ float shift[kMaxSmoothCols];
  float channel_amax = 0.0f;
  for (int c = threadIdx.x; c < p.cols; c += kQuantThreads) {
    ChannelTotal total;
    const float* partial = p.partial_stats + static_cast<int64_t>(head) * p.chunks * 3 * p.cols + c;
#pragma unroll 8  // the chunks' loads in flight together, not one L2 round trip after the other
    for (int k = 0; k < p.chunks; ++k) total.merge(partial + k * 3 * p.cols, p.cols);
    channel_amax = fmaxf(channel_amax, total.smoothed_amax(p.rows, shift, c));
    p.shift[static_cast<int64_t>(head) * p.cols + c] = shift[c];
  }
  const float amax = block_max(channel_amax);
  if (threadIdx.x == 0) p.scale[head] = scale_from_amax(amax);
}

// The head's scale: given, from the amax pass's partials, or (kSmooth) written by smooth_head_kernel.
template <bool kSmooth>
__device__ float head_scale_of(const QuantizeParams& p, int head) {
  __shared__ float head_scale;
  if (threadIdx.x < 32) {
    float amax = 0.0f;
    if (!kSmooth && p.given_scale == nullptr) {
      for (int i = threadIdx.x; i < p.chunks; i += 32) amax = fmaxf(amax, p.partial_amax[head * p.chunks + i]);
      amax = group_max<32>(amax);
    }
    if (threadIdx.x == 0) {
      head_scale = kSmooth                    ? p.scale[head]
                   : p.given_scale != nullptr ? p.given_scale[head]
                                              : scale_from_amax(amax);
    }
  }
  __syncthreads();
  return head_scale;
}

template <typename T, int kVec, bool kSmooth>
__global__ void __launch_bounds__(kQuantThreads) encode_kernel(const QuantizeParams p) {
  allow_next_grid_launch();  // the attention kernel after it may start its blocks (it waits for this grid)
  const Slice<kVec> s(p);
  const float scale = head_scale_of<kSmooth>(p, s.head);
  if (!kSmooth && s.chunk == 0 && threadIdx.x == 0) p.scale[s.head] = scale;
  const E4m3Divisor divisor(scale, p.given_scale == nullptr);
  float offset[kVec] = {};
  if constexpr (kSmooth) {  // every vector of this thread starts at column s.col(threadIdx.x)
#pragma unroll
    for (int e = 0; e < kVec; ++e) offset[e] = p.shift[static_cast<int64_t>(s.head) * p.cols + s.col(threadIdx.x) + e];
  }

  // The slice's codes are contiguous: vector i's at i kVec from its first.
  uint8_t* codes = p.codes + (static_cast<int64_t>(s.head) * p.rows + s.row_begin) * p.cols + threadIdx.x * kVec;
  ThreadVectors<T, kVec> vectors(p, s);
  for (int i = threadIdx.x; i < s.vectors; i += kQuantThreads, vectors.advance(), codes += kQuantThreads * kVec) {
    float x[kVec];
    vectors.load(p, s, i, x);
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] -= offset[e];
    store_codes<kVec>(codes, x, divisor);
  }
}

template <typename T, int kVec, bool kSmooth>
cudaError_t launch_two_pass(const QuantizeParams& p, cudaStream_t stream) {
  const unsigned heads = static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads);
  if (p.given_scale == nullptr) {
    amax_kernel<T, kVec, kSmooth><<<heads * p.chunks, kQuantThreads, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (kSmooth) {
    smooth_head_kernel<<<heads, kQuantThreads, 0, stream>>>(p);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  encode_kernel<T, kVec, kSmooth><<<heads * p.chunks, kQuantThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// Vectorized rows: 16-byte loads and 4- or 8-byte code stores (4x16x2048x128 q, k and v in fp16 took 307 us with
// one element per load and store on an H200).
template <typename T>
cudaError_t launch_typed(const QuantizeParams& p, cudaStream_t stream) {
  if (p.shift != nullptr) return launch_two_pass<T, 16 / sizeof(T), true>(p, stream);  // vectorized: smoothable_row
  return p.vectorized ? launch_two_pass<T, 16 / sizeof(T), false>(p, stream) : launch_two_pass<T, 1, false>(p, stream);
}

}  // namespace

int quantize_chunks(const QuantizeParams& p, int sms) {
  const int64_t per_head = static_cast<int64_t>(p.rows) * p.cols, heads = static_cast<int64_t>(p.batch) * p.heads;
  const int64_t wanted = (per_head + kQuantThreads * kElementsPerThread - 1) / (kQuantThreads * kElementsPerThread);
  const int64_t filling = (int64_t{kFillBlocksPerSm} * sms + heads - 1) / std::max<int64_t>(1, heads);
  const int64_t most = std::max<int64_t>(kMaxChunks, std::min<int64_t>(filling, kMaxFewHeadChunks));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, most, p.rows})));
}

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  return with_input_type(p.x_type, [&](auto value) { return launch_typed<decltype(value)>(p, stream); });
}

}  // namespace sdpa
