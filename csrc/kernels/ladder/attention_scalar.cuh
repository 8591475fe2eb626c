// Variants `scalar` (stage 0) and `cp_async` (stage 1): plain FMA loops and an online softmax.
//
// One block of 128 threads owns kBlockM = 16 query rows of one head; each row is handled by 8 consecutive
// threads. Per K/V tile of kBlockN = 32 keys:
//   S = Q K^T   each thread computes 4 scores (keys lane8, lane8 + 8, ...), full dot products from shared memory
//   m = max(m, rowmax(S)); P = exp2(S - m); l = l * alpha + rowsum(P)
//   O = O * alpha + P V   each thread owns D / 8 output dims (lane8 + 8 i), P is read back from shared memory
// Q, K and V are decoded once to float codes in shared memory; the per-head scales are folded into the
// softmax scale (q k) and the epilogue (v), so every product of codes is exact and sums are fp32.
// kStages = 0 reads each K/V tile straight from global memory between two barriers; kStages = 2 (`cp_async`)
// streams raw code tiles into a double buffer with cp.async, so tile j + 1 loads while tile j is computed.
#pragma once

#include "../common/attention_common.cuh"
#include "../common/fp8.h"
#include "../common/tile_rows.cuh"

namespace sdpa {

struct ScalarTiles {
  static constexpr int kBlockM = 16;
  static constexpr int kBlockN = 32;
  static constexpr int kThreads = 128;
  static constexpr int kThreadsPerRow = kThreads / kBlockM;
  static constexpr int kKeysPerThread = kBlockN / kThreadsPerRow;
};

template <int kHeadDim, int kStages>
struct ScalarSmem {
  using T = ScalarTiles;
  // +1 pads break the bank conflict of 8 threads reading 8 different rows at the same column.
  float q[T::kBlockM][kHeadDim + 1];
  float k[T::kBlockN][kHeadDim + 1];
  float v[T::kBlockN][kHeadDim];
  float p[T::kBlockM][T::kBlockN + 1];
  static constexpr int kTileCodes = T::kBlockN * kHeadDim;
  static constexpr int kRingOffset = (sizeof(float) * (T::kBlockM * (kHeadDim + 1) + T::kBlockN * (2 * kHeadDim + 1) +
                                                      T::kBlockM * (T::kBlockN + 1)) + 15) / 16 * 16;
  static constexpr int kBytes = kRingOffset + kStages * 2 * kTileCodes;  // ring: [kStages][K codes, V codes]
};

// Decodes a dense [kRows][kCols] tile of codes (global rows or a shared ring slot) into a float tile.
template <int kRows, int kCols, int kPitch, typename RowAt>
__device__ __forceinline__ void decode_tile(float (*tile)[kPitch], RowAt row_at, int row0, int rows) {
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
    const int r = i / kCols, c = i % kCols;
    tile[r][c] = row0 + r < rows ? e4m3_to_float(row_at(r)[c]) : 0.0f;
  }
}

// minBlocksPerSM = 1 spelled out: with the default, ptxas aims at 48 registers for the D = 128 sm_80 build and
// spills 16 bytes (nvcc 13.0); with it, 64-77 registers and no spill.
template <int kHeadDim, int kStages, typename OutT>
__global__ void __launch_bounds__(ScalarTiles::kThreads, 1) attention_scalar_kernel(const AttentionParams p) {
  using T = ScalarTiles;
  using Smem = ScalarSmem<kHeadDim, kStages>;
  using Rows = TileRows<T::kBlockN, kHeadDim>;
  constexpr int kDimsPerThread = kHeadDim / T::kThreadsPerRow;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  uint8_t* ring = smem_raw + Smem::kRingOffset;

  const int blocks_per_head = query_tiles(p, T::kBlockM);
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * T::kBlockM;
  const int row = threadIdx.x / T::kThreadsPerRow;
  const int lane8 = threadIdx.x % T::kThreadsPerRow;
  const int query = row0 + row;

  const uint8_t* q = q_head(p, c);
  Rows k_rows{k_head(p, c), p.k_row_stride, 0, p.seqlen_k};
  Rows v_rows{v_head(p, c), p.v_row_stride, 0, p.seqlen_k};
  const float score_scale = p.q_scale[c.batch * p.heads_q + c.head_q] *
                            p.k_scale[c.batch * p.heads_kv + c.head_kv] * p.softmax_scale * kLog2e;

  decode_tile<T::kBlockM, kHeadDim>(s.q, [&](int r) { return q + (row0 + r) * p.q_row_stride; }, row0, p.seqlen_q);

  const int tiles = key_tiles(p, row0, T::kBlockM, T::kBlockN);
  auto issue = [&](int tile) {  // cp_async only
    if (tile < tiles) {
      uint8_t* slot = ring + (tile % kStages) * 2 * Smem::kTileCodes;
      k_rows.key0 = v_rows.key0 = tile * T::kBlockN;
      copy_tile_async<T::kThreads>(slot, k_rows, threadIdx.x);
      copy_tile_async<T::kThreads>(slot + Smem::kTileCodes, v_rows, threadIdx.x);
    }
    cp_async_commit();
  };
  if constexpr (kStages > 0) issue(0);

  RowSoftmax softmax;
  float acc[kDimsPerThread] = {};
  for (int tile = 0; tile < tiles; ++tile) {
    const int key0 = tile * T::kBlockN;
    if constexpr (kStages > 0) {
      issue(tile + 1);
      cp_async_wait<1>();
      __syncthreads();  // the tile's codes have landed; the previous tile is consumed
      const uint8_t* slot = ring + (tile % kStages) * 2 * Smem::kTileCodes;
      decode_tile<T::kBlockN, kHeadDim>(s.k, [&](int r) { return slot + r * kHeadDim; }, key0, p.seqlen_k);
      decode_tile<T::kBlockN, kHeadDim>(s.v, [&](int r) { return slot + Smem::kTileCodes + r * kHeadDim; }, key0,
                                        p.seqlen_k);
    } else {
      __syncthreads();  // the previous tile is consumed (and s.q is written on the first pass)
      decode_tile<T::kBlockN, kHeadDim>(s.k, [&](int r) { return k_rows.head + (key0 + r) * p.k_row_stride; }, key0,
                                        p.seqlen_k);
      decode_tile<T::kBlockN, kHeadDim>(s.v, [&](int r) { return v_rows.head + (key0 + r) * p.v_row_stride; }, key0,
                                        p.seqlen_k);
    }
    __syncthreads();

    // S = Q K^T, scaled to log2 units, masked.
    float scores[T::kKeysPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < T::kKeysPerThread; ++i) {
      const int j = lane8 + i * T::kThreadsPerRow;
      float dot = 0.0f;
#pragma unroll 16
      for (int d = 0; d < kHeadDim; ++d) dot = fmaf(s.q[row][d], s.k[j][d], dot);
      const int key = key0 + j;
      const bool visible = key_visible(p, key, query);
      scores[i] = visible ? dot * score_scale : -INFINITY;
      tile_max = fmaxf(tile_max, scores[i]);
    }

    float offset;
    const float correction = softmax.rescale(group_max<T::kThreadsPerRow>(tile_max), &offset);
    float row_sum = 0.0f;
#pragma unroll
    for (int i = 0; i < T::kKeysPerThread; ++i) {
      const float prob = exp2f(scores[i] - offset);
      s.p[row][lane8 + i * T::kThreadsPerRow] = prob;
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
      for (int j = 0; j < T::kBlockN; ++j) o = fmaf(s.p[row][j], s.v[j][d], o);
      acc[i] = o;
    }
  }

  if (query >= p.seqlen_q) return;
  const float out_scale = v_scale_of(p, c) / softmax.sum;
  OutT* out = out_row<OutT>(p, c, query);
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = lane8 + i * T::kThreadsPerRow;
    if (d < p.out_dims) out[d] = from_float<OutT>(acc[i] * out_scale);
  }
  if (lane8 == 0) {
    lse_of(p, c, query) = softmax.lse();
  }
}

template <int kStages>
struct ScalarVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    return launch_with_smem(attention_scalar_kernel<kHeadDim, kStages, OutT>,
                            attention_blocks(p, ScalarTiles::kBlockM), ScalarTiles::kThreads,
                            ScalarSmem<kHeadDim, kStages>::kBytes, stream, p);
  }
};

}  // namespace sdpa
