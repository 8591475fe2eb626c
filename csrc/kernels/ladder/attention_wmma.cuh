// Variant `wmma` (stage 2): tensor cores through the WMMA API (16x16x16, fp16 in, fp32 accumulate).
//
// Four warps own 16 query rows each (kBlockM = 64); per K/V tile of kBlockN = 64 keys a warp does
//   S = Q K^T        WMMA, stored to the warp's fp32 scratch in shared memory
//   softmax          two lanes per row read S back, keep m and l in registers, write P as fp16
//   O = O * alpha    the O fragments make a round trip through the scratch to scale their rows
//   O += P V         WMMA with P from shared memory
// WMMA fragments have no documented element layout, hence the shared-memory staging that `fused_softmax` removes.
#pragma once

#include <mma.h>

#include "../common/attention_common.cuh"
#include "../common/fp8.h"

namespace sdpa {

template <int kHeadDim>
struct WmmaConfig {
  static constexpr int kBlockM = 64, kBlockN = 64, kWarps = kBlockM / 16, kThreads = kWarps * 32;
  static constexpr int kHalfPitch = kHeadDim + 8;  // +16 bytes per row staggers WMMA's row loads over banks
  static constexpr int kScratchPitch = (kHeadDim > kBlockN ? kHeadDim : kBlockN) + 4;
  static constexpr int kPPitch = kBlockN + 8;
  static constexpr int kHalfTile = kBlockM * kHalfPitch;  // Q, K and V tiles (kBlockM == kBlockN)
  static constexpr int kScratch = 16 * kScratchPitch;     // floats per warp
  static constexpr int kP = 16 * kPPitch;                 // halves per warp
  static constexpr int kSmemBytes = 3 * kHalfTile * 2 + kWarps * (kScratch * 4 + kP * 2);
};

// Decodes rows [row0, row0 + kRows) of a head into an fp16 tile (exact); rows past `rows` become 0.
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void decode_half_tile(__half* tile, const uint8_t* head, int64_t row_stride, int row0,
                                                 int rows) {
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
    const int r = i / kCols, c = i % kCols;
    tile[r * kPitch + c] = __float2half_rn(row0 + r < rows ? e4m3_to_float(head[(row0 + r) * row_stride + c]) : 0.f);
  }
}

template <int kHeadDim, typename OutT>
__global__ void __launch_bounds__(WmmaConfig<kHeadDim>::kThreads) attention_wmma_kernel(const AttentionParams p) {
  namespace wmma = nvcuda::wmma;
  using Cfg = WmmaConfig<kHeadDim>;
  using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* sQ = reinterpret_cast<__half*>(smem_raw);
  __half* sK = sQ + Cfg::kHalfTile;
  __half* sV = sK + Cfg::kHalfTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scratch = reinterpret_cast<float*>(sV + Cfg::kHalfTile) + warp * Cfg::kScratch;
  __half* sP = reinterpret_cast<__half*>(reinterpret_cast<float*>(sV + Cfg::kHalfTile) + Cfg::kWarps * Cfg::kScratch) +
               warp * Cfg::kP;

  const int blocks_per_head = query_tiles(p, Cfg::kBlockM);
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * Cfg::kBlockM;
  const uint8_t* k = k_head(p, c);
  const uint8_t* v = v_head(p, c);
  const float score_scale = p.q_scale[c.batch * p.heads_q + c.head_q] * p.k_scale[c.batch * p.heads_kv + c.head_kv] *
                            p.softmax_scale * kLog2e;
  decode_half_tile<Cfg::kBlockM, kHeadDim, Cfg::kHalfPitch>(
      sQ, q_head(p, c), p.q_row_stride, row0, p.seqlen_q);

  // Lane pair (2r, 2r + 1) owns row r of the warp's 16, columns [16 h, 16 h + 16) of every 32 (h = lane % 2).
  const int row = lane / 2, half = lane % 2, query = row0 + warp * 16 + row;
  RowSoftmax softmax;
  AccFrag o[kHeadDim / 16];
#pragma unroll
  for (auto& frag : o) wmma::fill_fragment(frag, 0.0f);

  const int keys = key_end(p, row0, Cfg::kBlockM);
  for (int key0 = 0; key0 < keys; key0 += Cfg::kBlockN) {
    __syncthreads();  // the previous tile is consumed (and sQ is written on the first pass)
    decode_half_tile<Cfg::kBlockN, kHeadDim, Cfg::kHalfPitch>(sK, k, p.k_row_stride, key0, p.seqlen_k);
    decode_half_tile<Cfg::kBlockN, kHeadDim, Cfg::kHalfPitch>(sV, v, p.v_row_stride, key0, p.seqlen_k);
    __syncthreads();

    // S = Q K^T for the warp's 16 rows; K row-major is K^T column-major.
#pragma unroll
    for (int nt = 0; nt < Cfg::kBlockN / 16; ++nt) {
      AccFrag s;
      wmma::fill_fragment(s, 0.0f);
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::load_matrix_sync(a, sQ + warp * 16 * Cfg::kHalfPitch + ks * 16, Cfg::kHalfPitch);
        wmma::load_matrix_sync(b, sK + nt * 16 * Cfg::kHalfPitch + ks * 16, Cfg::kHalfPitch);
        wmma::mma_sync(s, a, b, s);
      }
      wmma::store_matrix_sync(scratch + nt * 16, s, Cfg::kScratchPitch, wmma::mem_row_major);
    }
    __syncwarp();

    // Softmax of the warp's rows: scale, mask, running max/sum, P in fp16.
    float tile_max = -INFINITY;
    float scores[Cfg::kBlockN / 2];
#pragma unroll
    for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
      const int j = (i / 16) * 32 + half * 16 + i % 16;
      const int key = key0 + j;
      const bool visible = key_visible(p, key, query);
      scores[i] = visible ? scratch[row * Cfg::kScratchPitch + j] * score_scale : -INFINITY;
      tile_max = fmaxf(tile_max, scores[i]);
    }
    float offset;
    const float correction = softmax.rescale(group_max<2>(tile_max), &offset);
    float row_sum = 0.0f;
#pragma unroll
    for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
      const float prob = exp2f(scores[i] - offset);
      row_sum += prob;
      sP[row * Cfg::kPPitch + (i / 16) * 32 + half * 16 + i % 16] = __float2half_rn(prob);
    }
    softmax.sum += group_sum<2>(row_sum);
    __syncwarp();

    // O = O * correction: a round trip of the O fragments through the scratch.
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 16; ++dt) {
      wmma::store_matrix_sync(scratch + dt * 16, o[dt], Cfg::kScratchPitch, wmma::mem_row_major);
    }
    __syncwarp();
    for (int d = half; d < kHeadDim; d += 2) scratch[row * Cfg::kScratchPitch + d] *= correction;
    __syncwarp();
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 16; ++dt) {
      wmma::load_matrix_sync(o[dt], scratch + dt * 16, Cfg::kScratchPitch, wmma::mem_row_major);
    }

    // O += P V
#pragma unroll
    for (int kt = 0; kt < Cfg::kBlockN / 16; ++kt) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, sP + kt * 16, Cfg::kPPitch);
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 16; ++dt) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(b, sV + kt * 16 * Cfg::kHalfPitch + dt * 16, Cfg::kHalfPitch);
        wmma::mma_sync(o[dt], a, b, o[dt]);
      }
    }
    __syncwarp();  // the scratch is rewritten by the next tile's S
  }

  // Epilogue: O / l * v_scale, through the scratch.
#pragma unroll
  for (int dt = 0; dt < kHeadDim / 16; ++dt) {
    wmma::store_matrix_sync(scratch + dt * 16, o[dt], Cfg::kScratchPitch, wmma::mem_row_major);
  }
  __syncwarp();
  if (query >= p.seqlen_q) return;
  const float out_scale = v_scale_of(p, c) / softmax.sum;
  OutT* out = out_row<OutT>(p, c, query);
  for (int d = half; d < p.out_dims; d += 2) {
    out[d] = from_float<OutT>(scratch[row * Cfg::kScratchPitch + d] * out_scale);
  }
  if (half == 0) {
    lse_of(p, c, query) = softmax.lse();
  }
}

struct WmmaVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = WmmaConfig<kHeadDim>;
    return launch_with_smem(attention_wmma_kernel<kHeadDim, OutT>,
                            attention_blocks(p, Cfg::kBlockM), Cfg::kThreads,
                            Cfg::kSmemBytes, stream, p);
  }
};

}  // namespace sdpa
