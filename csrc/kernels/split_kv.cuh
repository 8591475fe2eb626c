// Split-KV for grids too small to fill the GPU: the keys of each query tile are divided among kv_splits blocks.
// Each block writes O / l and the log2-sum-exp2 of its rows to a workspace; the last block of a query tile to
// finish (an atomic counter per tile) combines the splits in the same launch:
//   m = max_s lse_s;  w_s = exp2(lse_s - m);  out = sum_s w_s O_s / sum_s w_s;  lse = m + log2(sum_s w_s)
#pragma once

#include "attention_common.cuh"
#include "ptx.cuh"

namespace sdpa {

// The range of key tiles [begin, end) that split `split` of `splits` handles, out of `tiles`.
struct TileRange {
  int begin, end;
  __device__ TileRange(int tiles, int split, int splits) {
    const int per_split = (tiles + splits - 1) / splits;
    begin = min(tiles, split * per_split);
    end = min(tiles, begin + per_split);
  }
};

__device__ __forceinline__ int64_t split_row_index(const AttentionParams& p, const HeadCoords& c, int row) {
  return (static_cast<int64_t>(c.batch) * p.heads_q + c.head_q) * p.seqlen_q + row;
}

// One row's partial result: O / l (0 when the split saw no visible key) and lse in log2 units (-inf then).
template <int kD>
__device__ __forceinline__ float* split_out_row(const AttentionParams& p, const HeadCoords& c, int row) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  return p.split_out + (c.split * rows + split_row_index(p, c, row)) * kD;
}
__device__ __forceinline__ float& split_lse_row(const AttentionParams& p, const HeadCoords& c, int split, int row) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  return p.split_lse[split * rows + split_row_index(p, c, row)];
}

// Called by the `threads` threads that wrote this block's partials (named barrier `barrier`): if this block is
// the last split of its query tile to finish, combines every split of rows [row0, row0 + kRows) into out and lse.
template <int kD, int kRows, typename OutT>
__device__ __forceinline__ void combine_splits(const AttentionParams& p, const HeadCoords& c, int blocks_per_head,
                                               int row0, int threads, int barrier) {
  __shared__ int is_last;
  __threadfence();  // this thread's partials are visible before the counter moves
  barrier_sync(barrier, threads);
  if (threadIdx.x == 0) {
    int* counter = p.split_counters + (c.batch * p.heads_q + c.head_q) * blocks_per_head + c.tile;
    is_last = atomicAdd(counter, 1) == p.kv_splits - 1;
  }
  barrier_sync(barrier, threads);
  if (!is_last) return;
  __threadfence();  // order the reads of the other splits' partials after the counter

  const float v_scale = p.v_scale[c.batch * p.heads_kv + c.head_kv];
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  for (int i = threadIdx.x; i < kRows * kD; i += threads) {
    const int row = row0 + i / kD, d = i % kD;
    if (row >= p.seqlen_q) continue;
    const int64_t index = split_row_index(p, c, row);
    float max = -INFINITY;
    for (int s = 0; s < p.kv_splits; ++s) max = fmaxf(max, p.split_lse[s * rows + index]);
    float weight_sum = 0.0f, acc = 0.0f;
    for (int s = 0; s < p.kv_splits; ++s) {
      const float weight = exp2f(p.split_lse[s * rows + index] - max);  // 0 for a split that saw nothing
      weight_sum += weight;
      acc += weight * p.split_out[(s * rows + index) * kD + d];
    }
    OutT* out = static_cast<OutT*>(p.out) + c.batch * p.out_batch_stride + c.head_q * p.out_head_stride +
                row * p.out_row_stride;
    out[d] = from_float<OutT>(acc / weight_sum * v_scale);
    if (d == 0) {
      p.lse[c.batch * p.lse_batch_stride + c.head_q * p.lse_head_stride + row * p.lse_row_stride] =
          (max + log2f(weight_sum)) * kLn2;
    }
  }
}

}  // namespace sdpa
