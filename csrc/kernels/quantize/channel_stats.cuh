// Per-channel statistics of a head's rows for smoothing (QuantizeParams::shift): the sum, min and max of every
// channel. The mean m and the amax of x - m follow from them without a second look at the values: rounding x - m
// to fp32 keeps the order of the x, so max |x - m| over a channel is max(max - m, m - min), exactly.
//
// A thread's vectors of kVec values all start at the same column while vectors_per_row (cols / kVec) divides the
// stride between them (smoothable_row in params.h; block sizes are multiples of 32): each thread keeps the
// statistics of its kVec channels, lanes of a warp that share channels are combined by shuffles, warps through
// shared memory, always in the same order, so the mean is the same bits on every run.
#pragma once

#include <cmath>

namespace sdpa {

// What a block keeps in shared memory: the statistics of its warps [3][warps][cols], its totals [3][cols] (which
// other blocks of a cluster read), and the head's shift [cols].
__host__ __device__ constexpr int channel_stats_floats(int warps, int cols) { return (3 * (warps + 1) + 1) * cols; }

template <int kVec>
struct ChannelStats {
  float sum[kVec], lo[kVec], hi[kVec];

  __device__ ChannelStats() {
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum[e] = 0.0f, lo[e] = INFINITY, hi[e] = -INFINITY;
  }

  __device__ void add(const float (&x)[kVec]) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum[e] += x[e], lo[e] = fminf(lo[e], x[e]), hi[e] = fmaxf(hi[e], x[e]);
  }

  // Combines the lanes that hold the same channels: those equal modulo vectors_per_row. A butterfly, so every lane
  // of a group ends with the same bits.
  __device__ void reduce_lanes(int vectors_per_row) {
    for (int offset = 16; offset >= vectors_per_row; offset /= 2) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        sum[e] += __shfl_xor_sync(0xFFFFFFFFu, sum[e], offset);
        lo[e] = fminf(lo[e], __shfl_xor_sync(0xFFFFFFFFu, lo[e], offset));
        hi[e] = fmaxf(hi[e], __shfl_xor_sync(0xFFFFFFFFu, hi[e], offset));
      }
    }
  }

  // After reduce_lanes: lanes below vectors_per_row write their warp's statistics of channels column..column + kVec
  // to stats [3][warps][cols].
  __device__ void store_warp(float* stats, int warps, int cols, int warp, int lane, int vectors_per_row,
                             int column) const {
    if (lane >= vectors_per_row) return;
    float* at = stats + warp * cols + column;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      at[e] = sum[e];
      at[warps * cols + e] = lo[e];
      at[2 * warps * cols + e] = hi[e];
    }
  }
};

// One channel's sum, min and max, merged from statistics laid out in three planes (sum, min, max) `stride` floats
// apart, as store_warp, the block totals and the two-pass chunks keep them. Every combiner merges in a fixed order.
struct ChannelTotal {
  float sum, lo, hi;

  __device__ ChannelTotal() : sum(0.0f), lo(INFINITY), hi(-INFINITY) {}
  __device__ ChannelTotal(const float* at, int stride) : sum(at[0]), lo(at[stride]), hi(at[2 * stride]) {}

  __device__ void merge(const float* at, int stride) {
    sum += at[0], lo = fminf(lo, at[stride]), hi = fmaxf(hi, at[2 * stride]);
  }

  // The channel's mean over `rows` rows (written to shift[c], the block's own, never memory that other blocks read)
  // and the amax of x - mean.
  __device__ float smoothed_amax(int rows, float* shift, int c) const {
    const float mean = sum / static_cast<float>(rows);
    shift[c] = mean;
    return fmaxf(hi - mean, mean - lo);
  }
};

// The block's totals [3][cols] from its warps' statistics (stats as store_warp wrote them, totals right after them).
// The caller synchronizes the block before (the warps' stores) and after (the totals).
__device__ __forceinline__ float* total_channel_stats(float* stats, int warps, int cols) {
  float* totals = stats + 3 * warps * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    ChannelTotal total;
    for (int w = 0; w < warps; ++w) total.merge(stats + w * cols + c, warps * cols);
    totals[c] = total.sum, totals[cols + c] = total.lo, totals[2 * cols + c] = total.hi;
  }
  return totals;
}

}  // namespace sdpa
