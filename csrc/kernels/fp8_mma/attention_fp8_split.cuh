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
#include "code_tiles.cuh"

namespace sdpa {

template <int kHeadDim_, int kRowGroups_, int kSplits_>
struct Fp8SplitConfig {
  static constexpr int kHeadDim = kHeadDim_, kRowGroups = kRowGroups_, kSplits = kSplits_, kStages = 2;
  using Warp = Fp8Config<kHeadDim, 1, kStages>;  // a warp's tile and numerics: fp16 P (full tier)
  static constexpr int kBlockM = 16 * kRowGroups, kBlockN = Warp::kBlockN;
  static constexpr bool kFp8Output = Warp::kFp8Output;
  using Softmax = typename Warp::Softmax;
  using Probabilities = typename Warp::Probabilities;
  static constexpr int kSplitThreads = 32 * kRowGroups, kThreads = kSplitThreads * kSplits;
  static constexpr int kTileBytes = kBlockN * kHeadDim;
  static constexpr int kSplitRingBytes = kStages * 2 * kTileBytes;  // [kStages][K codes, V codes] per split
  using Partials = SplitPartials<kHeadDim>;
  static constexpr int kSmemBytes = kSplits * kSplitRingBytes > kRowGroups * kSplits * Partials::kBytes
                                        ? kSplits * kSplitRingBytes
                                        : kRowGroups * kSplits * Partials::kBytes;
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;
};

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
    issue_code_tile<Cfg, Cfg::kSplitThreads>(ring, k_rows, v_rows, tile, last, (tile - first) % Cfg::kStages,
                                            split_thread);
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(first + t);

  Fp8WarpAttention<Cfg> w;
  const bool flip_q = w.start(p, c, row0, group, lane);
  w.load_q(p, c, flip_q, lane);
  run_key_group_rounds<Cfg>(tiles, first, last, ring, split_barrier, Cfg::kSplitThreads,
                            issue, [&](const uint8_t* slot, int tile) {
                              w.consume(slot, slot + Cfg::kTileBytes, tile * Cfg::kBlockN, p, lane);
                            });
  const float* partials = stage_partials<Cfg>(smem, w.softmax, w.o, warp, lane);
  // The MUFU forms of division and log2 are exact enough here: sum >= 1, since the split that holds the row max has
  // a P >= 1 (exp2f, IEEE division and log2f added 144 SASS instructions per thread to the merge, at 1x8x512x64
  // 0-0.03 us of 4.7).
  merge_partials<Cfg>(partials, min(Cfg::kBlockM, p.seqlen_q - row0),
                      [&](int row, int dim0, const float (&value)[8], float m, float sum) {
                        OutT* out = out_row<OutT>(p, c, row0 + row);
                        if (dim0 < p.out_dims) store_outputs(out + dim0, value, __fdividef(v_scale, sum));
                        if (dim0 == 0) lse_of(p, c, row0 + row) = (m + __log2f(sum)) * kLn2;
                      });
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
