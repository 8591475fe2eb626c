// Blocks whose warps split the keys of the same query rows (fp8_split, decode): every warp leaves its partial rows
// in shared memory, and the block merges the kSplits partials of each row: M = max m_s, L = sum l_s 2^(m_s - M),
// O = sum O_s 2^(m_s - M), where m_s is the exp2 offset of split s's row max (ScaledRowSoftmax::offset_of: the
// value its P were taken against; log2 units throughout; the caller divides by L, and lse is M + log2 L).
//
// Cfg names kHeadDim, kRowGroups (16-row warps per split), kSplits, kThreads and kBlockM (= 16 kRowGroups); warp
// w = split * kRowGroups + group writes partials + w * SplitPartials<kHeadDim>::kFloats.
#pragma once

#include <cfloat>

#include "attention_common.cuh"

namespace sdpa {

template <int kHeadDim>
struct SplitPartials {
  // A warp's partial rows: O [16][kStride], then (offset, sum) [16][2]. The 16 floats of padding put rows g and g + 1
  // sixteen banks apart, so the 8 lanes of each quarter-warp's 16-byte stores fill the 32 banks once.
  static constexpr int kStride = kHeadDim + 16;
  static constexpr int kFloats = 16 * (kStride + 2);
  static constexpr int kBytes = kFloats * 4;

  // Where dim sits in a partial row: the 16-byte chunks 8-15 of every 16 swap neighbours. The merge's quarter-warps
  // read chunks 2j (then 2j + 1) of one row, j = 0..7; unswizzled, chunks 2j and 2j + 8 share their banks.
  __device__ static int offset(int dim) { return ((dim / 4) ^ (dim / 32 % 2)) * 4 + dim % 4; }

  // Writes a warp's rows: quad(r, block) gives this lane's 4 values of row r (0: row lane / 4, 1: + 8) at dims
  // 16 block + 4 (lane % 4) + [0, 4); softmax[r] the row's exp2 offset and this lane's part of its sum.
  template <class Softmax, class Quad>
  __device__ static void write(float* mine, const Softmax (&softmax)[2], int lane, Quad quad) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int warp_row = lane / 4 + 8 * r;
      const float sum = group_sum<4>(softmax[r].sum);
#pragma unroll
      for (int block = 0; block < kHeadDim / 16; ++block) {
        const int dim = block * 16 + 4 * (lane % 4);
        *reinterpret_cast<float4*>(mine + warp_row * kStride + offset(dim)) = quad(r, block);
      }
      if (lane % 4 == 0) {
        *reinterpret_cast<float2*>(mine + 16 * kStride + 2 * warp_row) = make_float2(softmax[r].offset(), sum);
      }
    }
  }
};

// Merges the kSplits partials of the block's first `rows` rows and calls store(row, dim0, value, offset, sum) for 8
// consecutive dims of a row at a time, so that the split weights are derived once per 8 outputs (once per output,
// the merge took 434 of a warp's 3379 instructions in fp8_split at 1x8x512x64). A row that no split saw has offset
// -inf, sum 0 and values 0. The MUFU form of exp2 is exact enough: the weights are at most 1.
template <class Cfg, class Store>
__device__ __forceinline__ void merge_partials(const float* partials, int rows, Store store) {
  using Partials = SplitPartials<Cfg::kHeadDim>;
  constexpr int kDimGroups = Cfg::kHeadDim / 8;
  for (int i = threadIdx.x; i < rows * kDimGroups; i += Cfg::kThreads) {
    const int row = i / kDimGroups, dim0 = i % kDimGroups * 8, group = row / 16, warp_row = row % 16;
    const float* part[Cfg::kSplits];  // the partial rows of this row's warp in each split
    float2 stats[Cfg::kSplits];       // (offset, sum) of the row in each split
    float m = -INFINITY;
#pragma unroll
    for (int s = 0; s < Cfg::kSplits; ++s) {
      part[s] = partials + (s * Cfg::kRowGroups + group) * Partials::kFloats;
      stats[s] = *reinterpret_cast<const float2*>(part[s] + 16 * Partials::kStride + 2 * warp_row);
      m = fmaxf(m, stats[s].x);
    }
    const float reference = m == -INFINITY ? 0.0f : m;  // a finite one, so that unseen splits weigh 0, not NaN
    float sum = 0.0f, value[8] = {};
#pragma unroll
    for (int s = 0; s < Cfg::kSplits; ++s) {
      const float weight = fast_exp2(stats[s].x - reference);  // 0 for a split that saw no key of this row
      sum += stats[s].y * weight;
#pragma unroll
      for (int e = 0; e < 8; e += 4) {
        const float4 o = *reinterpret_cast<const float4*>(part[s] + warp_row * Partials::kStride +
                                                          Partials::offset(dim0 + e));
        value[e] += o.x * weight, value[e + 1] += o.y * weight, value[e + 2] += o.z * weight;
        value[e + 3] += o.w * weight;
      }
    }
    store(row, dim0, value, m, sum);
  }
}

}  // namespace sdpa
