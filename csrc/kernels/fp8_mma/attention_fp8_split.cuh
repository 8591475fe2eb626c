// `fp8_split` (sm_89 and later): the fp8_mma warp loop with the keys split across the warps of a block, for grids
// too small to fill the GPU (the mission shape 1x8x512x64 has 64 blocks of 64 rows for 132 SMs, and each warp
// then walks all 512 keys alone).
//
// A block owns kRowGroups x 16 query rows and runs kRowGroups x kSplits warps: split s takes a contiguous share of
// the key tiles, loading them through its own cp.async ring (shared by the kRowGroups warps of the split, synced
// by a named barrier per split), and each warp keeps the running max, sum and O of its 16 rows over its keys.
// At the end every warp writes its partial rows to shared memory and the block merges the kSplits partials of
// each row: M = max m_s, L = sum l_s 2^(m_s - M), O = sum O_s 2^(m_s - M) / L (log2 units throughout). No second
// launch: the split-KV combine kernel tried before cost more than it saved (11.6 against 9.5 us).
#pragma once

#include "attention_fp8.cuh"

namespace sdpa {

template <int kHeadDim_, int kRowGroups_, int kSplits_>
struct Fp8SplitConfig {
  static constexpr int kHeadDim = kHeadDim_, kRowGroups = kRowGroups_, kSplits = kSplits_, kStages = 2;
  static constexpr int kBlockM = 16 * kRowGroups, kBlockN = Fp8Config<kHeadDim, 1, kStages>::kBlockN;
  static constexpr int kSplitThreads = 32 * kRowGroups, kThreads = kSplitThreads * kSplits;
  static constexpr int kTileBytes = kBlockN * kHeadDim;
  static constexpr int kSplitRingBytes = kStages * 2 * kTileBytes;  // [kStages][K codes, V codes] per split
  // A warp's partial rows: O [16][kPartialStride], then (max, sum) [16][2]. The 16 floats of padding put rows g and
  // g + 1 sixteen banks apart, so the 8 lanes of each quarter-warp's 16-byte stores fill the 32 banks once.
  static constexpr int kPartialStride = kHeadDim + 16;
  static constexpr int kPartialFloats = 16 * (kPartialStride + 2);
  static constexpr int kSmemBytes = kSplits * kSplitRingBytes > kRowGroups * kSplits * kPartialFloats * 4
                                        ? kSplits * kSplitRingBytes
                                        : kRowGroups * kSplits * kPartialFloats * 4;
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;

  // Where dim sits in a partial row: the 16-byte chunks 8-15 of every 16 swap neighbours. The merge's quarter-warps
  // read chunks 2j (then 2j + 1) of one row, j = 0..7; unswizzled, chunks 2j and 2j + 8 share their banks.
  __device__ static int partial_offset(int dim) { return ((dim / 4) ^ (dim / 32 % 2)) * 4 + dim % 4; }
};

// Merges the kSplits partials of every row of the block and writes out and lse. A thread takes 8 consecutive dims
// of a row, so the split weights are derived once per 8 outputs (once per output, the merge took 434 of a warp's
// 3379 instructions at 1x8x512x64). The MUFU forms of exp2, division and log2 are exact enough here: the weights are
// at most 1, and sum >= 1, since the split that holds the row max has a P >= 1 (exp2f, IEEE division and log2f
// added 144 SASS instructions per thread to the merge, at 1x8x512x64 0-0.03 us of 4.7).
template <class Cfg, typename OutT>
__device__ __forceinline__ void merge_partials(const float* partials, const AttentionParams& p, const HeadCoords& c,
                                               int row0, float v_scale) {
  constexpr int kD = Cfg::kHeadDim, kDimGroups = kD / 8;
  for (int i = threadIdx.x; i < Cfg::kBlockM * kDimGroups; i += Cfg::kThreads) {
    const int row = i / kDimGroups, dim0 = i % kDimGroups * 8, group = row / 16, warp_row = row % 16;
    if (row0 + row >= p.seqlen_q) continue;
    const float* part[Cfg::kSplits];  // the partial rows of this row's warp in each split
    float2 stats[Cfg::kSplits];       // (max, sum) of the row in each split
    float m = -INFINITY;
#pragma unroll
    for (int s = 0; s < Cfg::kSplits; ++s) {
      part[s] = partials + (s * Cfg::kRowGroups + group) * Cfg::kPartialFloats;
      stats[s] = *reinterpret_cast<const float2*>(part[s] + 16 * Cfg::kPartialStride + 2 * warp_row);
      m = fmaxf(m, stats[s].x);
    }
    float sum = 0.0f, value[8] = {};
#pragma unroll
    for (int s = 0; s < Cfg::kSplits; ++s) {
      const float weight = fast_exp2(stats[s].x - m);  // 0 for a split that saw no key of this row
      sum += stats[s].y * weight;
#pragma unroll
      for (int e = 0; e < 8; e += 4) {
        const float4 o = *reinterpret_cast<const float4*>(part[s] + warp_row * Cfg::kPartialStride +
                                                          Cfg::partial_offset(dim0 + e));
        value[e] += o.x * weight, value[e + 1] += o.y * weight, value[e + 2] += o.z * weight;
        value[e + 3] += o.w * weight;
      }
    }
    OutT* out = out_row<OutT>(p, c, row0 + row);
    store_outputs(out + dim0, value, __fdividef(v_scale, sum));
    if (dim0 == 0) {
      lse_of(p, c, row0 + row) = (m + __log2f(sum)) * kLn2;
    }
  }
}

// minBlocksPerSM = 1 spelled out: with the default, ptxas stopped at 128 registers and spilled 24 bytes at D = 64
// (nvcc 13.0, sm_90a); with it, 172 and no spill.
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, 1) attention_fp8_split_kernel(const AttentionParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int blocks_per_head = query_tiles(p, Cfg::kBlockM);
  const HeadCoords c = head_coords(p, blocks_per_head);
  const int row0 = c.tile * Cfg::kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = warp / Cfg::kRowGroups, group = warp % Cfg::kRowGroups;
  const int tiles = key_tiles(p, row0, Cfg::kBlockM, Cfg::kBlockN);
  const int first = split * tiles / Cfg::kSplits, last = (split + 1) * tiles / Cfg::kSplits;
  allow_next_grid_launch();
  wait_for_previous_grids();  // everything above is index math, overlapped with the previous kernel's tail
  const float v_scale = v_scale_of(p, c);  // loaded now, used by the merge at the end

  uint8_t* ring = smem + split * Cfg::kSplitRingBytes;
  const typename Cfg::Rows k_rows{k_head(p, c), p.k_row_stride, 0, p.seqlen_k};
  const typename Cfg::Rows v_rows{v_head(p, c), p.v_row_stride, 0, p.seqlen_k};
  const int split_thread = threadIdx.x % Cfg::kSplitThreads, split_barrier = 1 + split;
  auto issue = [&](int tile) {
    issue_fp8_tile<Cfg, Cfg::kSplitThreads>(ring, k_rows, v_rows, tile, last, (tile - first) % Cfg::kStages,
                                            split_thread);
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(first + t);

  Fp8WarpAttention<Cfg> w;
  const bool flip_q = w.start(p, c, row0, group, lane);
  w.load_q(q_head(p, c), p.q_row_stride, p.seqlen_q, flip_q, lane);
  // Every split runs the same number of rounds (a split with one tile fewer idles through the last), so that all
  // warps pass the same sequence of barriers. A round refills the slot the round before read only once its own
  // tile has landed, so one barrier per round covers both hand-overs. Requesting the next tile before the wait, with
  // a barrier on each side, measured 4.57-4.65 against 4.55-4.63 us at 1x8x512x64 in two runs and 22.66 against
  // 22.43 us at 1x8x512x4096x64 (H200).
  const int rounds = (tiles + Cfg::kSplits - 1) / Cfg::kSplits;
  for (int round = 0; round < rounds; ++round) {
    const int tile = first + round;
    cp_async_wait<Cfg::kStages - 2>();
    // The tile's codes are visible to the split's warps, which are done with the slot refilled next.
    barrier_sync(split_barrier, Cfg::kSplitThreads);
    issue(tile + Cfg::kStages - 1);
    const uint8_t* slot = ring + round % Cfg::kStages * 2 * Cfg::kTileBytes;
    if (tile < last) w.consume(slot, slot + Cfg::kTileBytes, tile * Cfg::kBlockN, p, lane);
  }

  __syncthreads();  // every ring is done: the partials reuse the shared memory
  float* partials = reinterpret_cast<float*>(smem);
  float* mine = partials + warp * Cfg::kPartialFloats;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int warp_row = lane / 4 + 8 * r;
    const float sum = group_sum<4>(w.softmax[r].sum);
#pragma unroll
    for (int block = 0; block < Cfg::kHeadDim / 16; ++block) {
      const int dim = block * 16 + 4 * (lane % 4);
      *reinterpret_cast<float4*>(mine + warp_row * Cfg::kPartialStride + Cfg::partial_offset(dim)) =
          w.output_quad(r, block);
    }
    if (lane % 4 == 0) {
      *reinterpret_cast<float2*>(mine + 16 * Cfg::kPartialStride + 2 * warp_row) = make_float2(w.softmax[r].max, sum);
    }
  }
  __syncthreads();
  merge_partials<Cfg, OutT>(partials, p, c, row0, v_scale);
}

template <int kRowGroups, int kSplits>
struct Fp8SplitVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    using Cfg = Fp8SplitConfig<kHeadDim, kRowGroups, kSplits>;
    return launch_overlapping(p.overlap_launch, attention_fp8_split_kernel<Cfg, OutT>,
                              attention_blocks(p, Cfg::kBlockM), Cfg::kThreads,
                              Cfg::kSmemBytes, stream, p);
  }
};

}  // namespace sdpa
