// Variant `scalar` (stage 0): plain FMA loops and an online softmax; the readable baseline.
//
// One block of 128 threads owns kBlockM = 16 query rows of one head; each row is handled by 8 consecutive
// threads. Per K/V tile of kBlockN = 32 keys:
//   S = Q K^T   each thread computes 4 scores (keys lane8, lane8 + 8, ...), full dot products from shared memory
//   m = max(m, rowmax(S)); P = exp2(S - m); l = l * alpha + rowsum(P)
//   O = O * alpha + P V   each thread owns D / 8 output dims (lane8 + 8 i), P is read back from shared memory
// Q, K and V are decoded once to float codes in shared memory; the per-head scales are folded into the
// softmax scale (q k) and the epilogue (v), so every product of codes is exact and sums are fp32.
#pragma once

#include "attention_common.cuh"
#include "fp8.h"

namespace sdpa {

struct ScalarTiles {
  static constexpr int kBlockM = 16;
  static constexpr int kBlockN = 32;
  static constexpr int kThreads = 128;
  static constexpr int kThreadsPerRow = kThreads / kBlockM;
  static constexpr int kKeysPerThread = kBlockN / kThreadsPerRow;
};

// Decodes rows [row0, row0 + kRows) of one head into a float tile; rows past `rows` become 0.
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void load_decoded_tile(float (*tile)[kPitch], const uint8_t* head, int64_t row_stride,
                                                  int row0, int rows) {
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
    const int r = i / kCols, c = i % kCols;
    tile[r][c] = row0 + r < rows ? e4m3_to_float(head[(row0 + r) * row_stride + c]) : 0.0f;
  }
}

template <int kHeadDim, typename OutT>
__global__ void __launch_bounds__(ScalarTiles::kThreads) attention_scalar_kernel(const AttentionParams p) {
  using T = ScalarTiles;
  constexpr int kDimsPerThread = kHeadDim / T::kThreadsPerRow;
  // +1 pads break the bank conflict of 8 threads reading 8 different rows at the same column.
  __shared__ float sQ[T::kBlockM][kHeadDim + 1];
  __shared__ float sK[T::kBlockN][kHeadDim + 1];
  __shared__ float sV[T::kBlockN][kHeadDim];
  __shared__ float sP[T::kBlockM][T::kBlockN + 1];

  const int blocks_per_head = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * T::kBlockM;
  const int row = threadIdx.x / T::kThreadsPerRow;
  const int lane8 = threadIdx.x % T::kThreadsPerRow;
  const int query = row0 + row;

  const uint8_t* q = p.q + c.batch * p.q_batch_stride + c.head_q * p.q_head_stride;
  const uint8_t* k = p.k + c.batch * p.k_batch_stride + c.head_kv * p.k_head_stride;
  const uint8_t* v = p.v + c.batch * p.v_batch_stride + c.head_kv * p.v_head_stride;
  const float score_scale = p.q_scale[c.batch * p.heads_q + c.head_q] *
                            p.k_scale[c.batch * p.heads_kv + c.head_kv] * p.softmax_scale * kLog2e;

  load_decoded_tile<T::kBlockM, kHeadDim>(sQ, q, p.q_row_stride, row0, p.seqlen_q);

  RowSoftmax softmax;
  float acc[kDimsPerThread] = {};
  const int keys = key_end(p, row0, T::kBlockM);
  for (int key0 = 0; key0 < keys; key0 += T::kBlockN) {
    __syncthreads();  // the previous tile is consumed (and sQ is written on the first pass)
    load_decoded_tile<T::kBlockN, kHeadDim>(sK, k, p.k_row_stride, key0, p.seqlen_k);
    load_decoded_tile<T::kBlockN, kHeadDim>(sV, v, p.v_row_stride, key0, p.seqlen_k);
    __syncthreads();

    // S = Q K^T, scaled to log2 units, masked.
    float s[T::kKeysPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < T::kKeysPerThread; ++i) {
      const int j = lane8 + i * T::kThreadsPerRow;
      float dot = 0.0f;
#pragma unroll 16
      for (int d = 0; d < kHeadDim; ++d) dot = fmaf(sQ[row][d], sK[j][d], dot);
      const int key = key0 + j;
      const bool visible = key < p.seqlen_k && (!p.is_causal || key <= query);
      s[i] = visible ? dot * score_scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[i]);
    }

    float offset;
    const float correction = softmax.rescale(group_max<T::kThreadsPerRow>(tile_max), &offset);
    float row_sum = 0.0f;
#pragma unroll
    for (int i = 0; i < T::kKeysPerThread; ++i) {
      const float prob = exp2f(s[i] - offset);
      sP[row][lane8 + i * T::kThreadsPerRow] = prob;
      row_sum += prob;
    }
    softmax.sum += group_sum<T::kThreadsPerRow>(row_sum);
    __syncwarp();  // a row's P is written and read by the 8 threads of one warp

    // O = O * correction + P V
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      float o = acc[i] * correction;
      const int d = lane8 + i * T::kThreadsPerRow;
#pragma unroll 8
      for (int j = 0; j < T::kBlockN; ++j) o = fmaf(sP[row][j], sV[j][d], o);
      acc[i] = o;
    }
  }

  if (query >= p.seqlen_q) return;
  const float out_scale = p.v_scale[c.batch * p.heads_kv + c.head_kv] / softmax.sum;
  OutT* out = static_cast<OutT*>(p.out) + c.batch * p.out_batch_stride + c.head_q * p.out_head_stride +
              query * p.out_row_stride;
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) out[lane8 + i * T::kThreadsPerRow] = from_float<OutT>(acc[i] * out_scale);
  if (lane8 == 0) {
    p.lse[c.batch * p.lse_batch_stride + c.head_q * p.lse_head_stride + query * p.lse_row_stride] = softmax.lse();
  }
}

struct ScalarVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    const int blocks_per_head = (p.seqlen_q + ScalarTiles::kBlockM - 1) / ScalarTiles::kBlockM;
    const int64_t blocks = static_cast<int64_t>(blocks_per_head) * p.batch * p.heads_q;
    attention_scalar_kernel<kHeadDim, OutT><<<static_cast<unsigned>(blocks), ScalarTiles::kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
};

}  // namespace sdpa
