// How the decode kernel's key splits (decode_plan.h) meet: each split writes, per row, its output normalized by its
// own sum and its lse in log2 units to the workspace, and decode_combine_kernel merges them:
// out = sum_s w_s O_s / sum_s w_s with w_s = 2^(lse_s - max lse).
#pragma once

#include "../common/attention_common.cuh"
#include "decode_plan.h"

namespace sdpa {

// Where the partial rows of key split `split` go in the workspace: O [splits][rows][D], then lse [splits][rows],
// float32.
template <int kHeadDim>
__host__ __device__ __forceinline__ float* partial_o(void* workspace, const DecodePlan& plan, int split,
                                                     int64_t row) {
  return static_cast<float*>(workspace) + (split * plan.rows + row) * kHeadDim;
}
template <int kHeadDim>
__host__ __device__ __forceinline__ float* partial_lse(void* workspace, const DecodePlan& plan, int split,
                                                       int64_t row) {
  return static_cast<float*>(workspace) + plan.splits * plan.rows * kHeadDim + split * plan.rows + row;
}

// Writes a finished row (lse in log2 units; -inf and zeros for a row that saw no key): kHeadDim / 32 dims per lane.
template <int kHeadDim, typename OutT>
__device__ __forceinline__ void store_merged_row(const AttentionParams& p, int64_t row, const float* value,
                                                 float max, float sum, int lane) {
  constexpr int kDims = kHeadDim / 32;
  const int query = static_cast<int>(row % p.seqlen_q), head_q = static_cast<int>(row / p.seqlen_q % p.heads_q);
  const HeadCoords c{static_cast<int>(row / p.seqlen_q / p.heads_q), head_q, 0, 0};
  const float out_scale = sum > 0.0f ? 1.0f / sum : 0.0f;
  OutT* out = out_row<OutT>(p, c, query) + lane * kDims;
#pragma unroll
  for (int e = 0; e < kDims; e += 2) {
    const float pair[2] = {value[e], value[e + 1]};
    if (lane * kDims + e < p.out_dims) store_outputs(out + e, pair, out_scale);
  }
  if (lane == 0) lse_of(p, c, query) = sum > 0.0f ? (max + log2f(sum)) * kLn2 : -INFINITY;
}

constexpr int kCombineWarps = 8;
constexpr int kCombineBatch = 4;  // splits whose loads a warp issues before it uses any

// A lane's kDims consecutive floats of a partial row (2, 4 or 8), loaded in as few 8- or 16-byte loads as hold them.
template <int kDims>
struct alignas(kDims >= 4 ? 16 : 4 * kDims) LaneDims {
  float v[kDims];
};

// Merges the key splits of a row from the workspace (a block per row). Warp w takes splits w, w + 8, ..., a lane
// kHeadDim / 32 dims of each, kCombineBatch splits' lse and O requested together, and keeps its own running max;
// warp 0 then adds up the warps, each rescaled to the row's max. Up to 32 splits this is one round of loads: the
// merge waits on L2 latency, not bandwidth (a warp per row walking the splits one after the other took 11 us of a
// 104 us call at 1x32x8x131072x128: 32 splits, 32 rows, 32 warps on the whole GPU; ncu, H100).
template <int kHeadDim, typename OutT>
__global__ void __launch_bounds__(32 * kCombineWarps) decode_combine_kernel(const AttentionParams p,
                                                                          const DecodePlan plan) {
  constexpr int kDims = kHeadDim / 32;
  using Dims = LaneDims<kDims>;
  __shared__ float warp_values[kCombineWarps][kHeadDim];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x;
  allow_next_grid_launch();
  wait_for_previous_grids();  // the partial rows come from the kernel before
  float m = -INFINITY, sum = 0.0f, value[kDims] = {};
  for (int s0 = warp; s0 < plan.splits; s0 += kCombineWarps * kCombineBatch) {
    float lse[kCombineBatch];
    Dims o[kCombineBatch];
    float batch_max = m;
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int s = s0 + j * kCombineWarps;
      lse[j] = s < plan.splits ? *partial_lse<kHeadDim>(p.workspace, plan, s, row) : -INFINITY;
      o[j] = s < plan.splits ? reinterpret_cast<const Dims*>(partial_o<kHeadDim>(p.workspace, plan, s, row))[lane]
                             : Dims{};
      batch_max = fmaxf(batch_max, lse[j]);
    }
    if (batch_max == -INFINITY) continue;  // no split so far saw a key of the row
    const float rescale = fast_exp2(m - batch_max);  // 0 while m is -inf
    sum *= rescale;
#pragma unroll
    for (int e = 0; e < kDims; ++e) value[e] *= rescale;
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const float w = fast_exp2(lse[j] - batch_max);  // 0 for a split that saw no key of the row, or none at all
      sum += w;
#pragma unroll
      for (int e = 0; e < kDims; ++e) value[e] += w * o[j].v[e];
    }
    m = batch_max;
  }
#pragma unroll
  for (int e = 0; e < kDims; ++e) warp_values[warp][lane * kDims + e] = value[e];
  if (lane == 0) warp_max[warp] = m, warp_sum[warp] = sum;
  __syncthreads();
  if (warp != 0) return;
  m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) m = fmaxf(m, warp_max[w]);
  sum = 0.0f;
  float total[kDims] = {};
  if (m != -INFINITY) {
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) {
      const float weight = fast_exp2(warp_max[w] - m);  // 0 for a warp that saw no key of the row
      sum += warp_sum[w] * weight;
#pragma unroll
      for (int e = 0; e < kDims; ++e) total[e] += warp_values[w][lane * kDims + e] * weight;
    }
  }
  store_merged_row<kHeadDim, OutT>(p, row, total, m, sum, lane);
}

}  // namespace sdpa
