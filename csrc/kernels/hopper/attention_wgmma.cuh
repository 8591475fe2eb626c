// The Hopper variants (sm_90a): warpgroup MMA with a producer warpgroup, FlashAttention-3 style.
//   wgmma      full tier: Q and K decoded to fp16 (exact), S = Q K^T by fp16 wgmma with fp32 sums, Q from
//              registers
//   wgmma_fp8  fast tier: S = Q K^T by e4m3 wgmma straight on the codes; the Hopper FP8 tensor cores sum with
//              about 14 significant bits (lse off by up to 1.0e-3, by 1.5 at |lse| ~ 4000, and by 1.2e-3 of |lse|
//              where every product is positive; fp32 sums stay under 5.6e-4 and 5.0e-4)
//   wgmma_fp8+fp8_pv  O += P V by e4m3 wgmma too (kFp8Output): P cast to E4M3, V codes transposed by the producers
//              or, where a kv head has many query blocks, by a pass over memory (kValuesByPass)
//   wgmma+predecode  `wgmma` on fp16 copies of K and V (kv_to_half.h): TMA lands them in the ring as they are, so
//              no block decodes its own tiles, one producer warp starts the copies and the consumers wait on the
//              copies' mbarriers. Every query block of a head decoded all of its keys before; at 4x16x2048x128 the
//              attention kernel takes 207.2 against 245.2 us (H200). A pass over memory decodes the first kv
//              heads and the other three producer warps decode the rest ahead of the blocks that read
//              them (kv_decode_ahead.cuh): 5.9 us of pass and 210.1 of attention there, against 28.8 us for a pass
//              over every head. It pays where a kv head has many query rows (attention_dispatch.cu).
//   wgmma+predecode at D = 256: the one Hopper kernel there (WgmmaConfig::kWide), 64-key tiles in a ring of two,
//              Q as an fp16 tile in shared memory, each slot's K and V copied and freed apart (kSeparateValues)
//   wgmma_m192 `wgmma` at D = 64 with three consumer groups (192 query rows, kConsumerGroups), Q as an fp16 tile in
//              shared memory, the last wave split (WgmmaJob), and each group stopping after its own rows' key tiles
//              (kGroupTiles): 4x16x2048x64 148.5 against 165.9 us, causal 94.2 against 102.1 (H200, same run).
//   wgmma_fp8_m192+fp8_pv  `wgmma_fp8+fp8_pv` the same way (three groups, no turns, split tail, group tiles),
//              with Q's codes in registers (8 of them, 16 at D = 128): FlashAttention-3's 192-row FP8 tiles at
//              D = 64; at D = 128 on 64-key tiles, and with V^T from the pass where it pays.
//
// A block owns kBlockM = 128 query rows and runs three warpgroups:
//   producer     one thread starts TMA copies of each K/V tile (kBlockN keys) into a ring of kStages slots; the
//                warpgroup decodes V (and for `wgmma` K) to fp16 in shared memory and hands each slot over with a
//                named barrier.
//   2 consumers  64 query rows each; per tile
//                  S = Q K^T   wgmma with Q as A fragments in registers, loaded by each consumer from global memory
//                              at the start (fp16 for `wgmma`, codes for `wgmma_fp8`), and K from shared memory
//                  softmax     in registers: wgmma's accumulators are, per warp, the m16n8 C layout of 16 rows,
//                              so fragment_softmax.cuh applies unchanged
//                  O += P V    wgmma m64nDk16 f16, P from registers (the S accumulators re-packed), V N-major
//                              (fp8_pv: m64nDk32 e4m3 on P's E4M3 fragments and the transposed V codes)
// P stays fp16 (but for fp8_pv). Producers give up registers (setmaxnreg) to the consumers, which hold S
// (kBlockN / 2 floats), P (kBlockN / 4 words for the tile whose P V runs, and as many for the tile in the softmax
// without kLatePack; half that for fp8_pv), Q (D / 4 words of fp16 or D / 8 of codes) and O (D / 2 floats) per
// thread.
//
// Shared memory, every tile on a 1024-byte boundary (the hardware swizzle follows absolute address bits): per
//   slot K codes and V codes [kBlockN][D], fp16 V (+ fp16 K), then the mbarriers of the TMA copies. fp16 tiles
//   are D / 64 panels of [rows][64 dims] with the 128-byte swizzle (chunk ^ row % 8): K-major for K, N-major for
//   V. For `wgmma_fp8` the TMA writes K codes in wgmma's 64- or 128-byte swizzle of D-byte rows
//   (SwizzledCodeLayout); V codes are plain, or for fp8_pv in K's swizzle, and the slot's third tile is their
//   transpose [D][kBlockN] in the swizzle of kBlockN-byte rows instead of fp16 V (kValuesByPass: that transpose in
//   V's place, copied by TMA).
// The copies use TMA rather than cp.async: with cp.async (and the proxy fence that must follow the copies before
// wgmma may read the data) the ring never held more than one tile in flight and wgmma_fp8 took 401 us at
// 4x16x2048x128, 331 us with the V decode removed and 244 us with no loads at all (H200, nvcc 13.0); with TMA,
// 270 us. That the fence (MEMBAR.ALL.CTA in SASS) waited for the copies in flight was the guess then; timed alone it
// does not (scripts/probe_proxy_fence.cu: 17-21 cycles with copies in flight, 14 without).
// This file holds the kernel and its launch; wgmma_config.cuh the blocks' shapes, wgmma_block.cuh what the warpgroups
// share, wgmma_producers.cuh and wgmma_consumers.cuh the two roles.
#pragma once

#include "../common/attention_common.cuh"
#include "grid_order.h"
#include "hopper.cuh"
#include "kv_decode_ahead.cuh"
#include "transpose_values.h"
#include "wgmma_consumers.cuh"
#include "wgmma_producers.cuh"

namespace sdpa {

// Blocks from split_from on are split units (WgmmaJob); split_from is the block count when there are none.
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSm)
    attention_wgmma_kernel(const AttentionParams p, const __grid_constant__ WgmmaMaps maps, int split_from) {
#if SDPA_HAS_SM90A
  allow_next_grid_launch();
  const WgmmaJob job = wgmma_job<Cfg>(p, maps.order, split_from, blockIdx.x);
  if (job.row0 >= p.seqlen_q) return;  // a split unit past the last query row; the whole block leaves
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const WgmmaSmem<Cfg> smem{smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024};
  if (threadIdx.x == 0) {
    for (int bar = 0; bar < Cfg::kMbarriers; ++bar) mbarrier_init(smem.tile_loaded(bar), 1);  // and the others
    fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers are initialized
  // Launched as a programmatic dependent launch: the kernel before (the quantizer, or the pass of kv_to_half.cu or
  // transpose_values.cu) may still write q, k, v or their copies. Everything above overlaps its tail.
  wait_for_previous_grids();
  const HeadCoords& c = job.c;
  const int tiles = key_tiles(p, c.tile * Cfg::kBlockM, Cfg::kBlockM, Cfg::kBlockN);
  if (threadIdx.x >= Cfg::kConsumerThreads) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x >= Cfg::kThreads - 32) prefetch_later_q<Cfg>(p, maps, split_from, threadIdx.x % 32);
    if constexpr (Cfg::kPredecoded) {
      const int tid = threadIdx.x - Cfg::kConsumerThreads;
      if (tid < 32) {
        load_half_tiles<Cfg>(smem, maps, c, p.heads_kv, tiles);
      } else {
        decode_ahead<Cfg::kHeadDim, Cfg::kBlockN, Cfg::kProducerThreads - 32, WgmmaBarriers<Cfg>::kDecodeAhead>(
            maps.plan, maps.k_codes, maps.v_codes, p.heads_kv, p.seqlen_k, smem.ahead_codes(), smem.ahead_loaded(),
            smem.ahead_job(), tid - 32);
      }
    } else if constexpr (Cfg::kValuesByPass) {
      if (threadIdx.x - Cfg::kConsumerThreads < 32) load_code_tiles<Cfg>(smem, maps, job, tiles);
    } else {
      produce_tiles<Cfg>(smem, maps, job, tiles);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    if constexpr (Cfg::kQInSmem && !Cfg::kQuantizesQRows) decode_q_tile<Cfg>(smem, p, job);
    consume_tiles<Cfg, OutT>(smem, p, job, tiles);
  }
#else
  __trap();  // built for sm_90a only; the host launches it on sm_90 only
#endif
}

// How the TMA reads v: plain [kv_rows][D] boxes, boxes in K's swizzle (for transpose_v_tile), or V^T from
// p.workspace (transpose_values.h) in [D][kv_rows] boxes.
enum class ValuesMap { kPlain, kSwizzled, kTransposed };
// Encodes the TMA descriptors of k and v (attention_wgmma.cu), k swizzled for e4m3 wgmma when `swizzle_k`; fails
// for strides the TMA cannot express.
cudaError_t make_wgmma_maps(const AttentionParams& p, int kv_rows, bool swizzle_k, ValuesMap values,
                            WgmmaMaps* maps);
// Plans the fp16 copies of K and V in p.workspace for a grid of block_m query rows per block (kv_to_half.h),
// enqueues the pass over the first kv heads, and encodes TMA descriptors of the copies, read in 128-byte swizzled
// panels of kv_rows x 64 dims, and of the codes the grid decodes ahead, in plain boxes of kv_rows rows.
cudaError_t predecode_wgmma_kv(const AttentionParams& p, int kv_rows, int block_m, WgmmaMaps* maps,
                               cudaStream_t stream);

// The first block of the split units (WgmmaJob): the query tiles of the last wave, when the units of all of them
// fit in one wave, where each has 1 / groups of the tile's keys. Not causal (that grid runs heaviest first, so its
// last wave is already the cheapest), and only with a key tile for every group. `blocks` when there are none.
int64_t split_tail_from(const AttentionParams& p, int64_t blocks, int groups, int block_n);

template <class Cfg, typename OutT>
cudaError_t launch_wgmma_config(const AttentionParams& p, cudaStream_t stream) {
  if constexpr (!Cfg::kQuantizesQRows && Cfg::kHeadDim <= 128) {
    if (p.q_row_groups) return launch_wgmma_config<typename Cfg::QuantizingQRows, OutT>(p, stream);
  }
  constexpr bool kPredecoded = Cfg::kPredecoded;
  constexpr ValuesMap kValues = Cfg::kValuesByPass ? ValuesMap::kTransposed
                                : Cfg::kFp8Output  ? ValuesMap::kSwizzled
                                                   : ValuesMap::kPlain;
  WgmmaMaps maps;
  cudaError_t err = kPredecoded ? predecode_wgmma_kv(p, Cfg::kBlockN, Cfg::kBlockM, &maps, stream)
                                : make_wgmma_maps(p, Cfg::kBlockN, Cfg::kFp8Scores, kValues, &maps);
  if (err == cudaSuccess && Cfg::kValuesByPass) err = launch_transpose_values(p, stream);
  if (err != cudaSuccess) return err;
  // Causal, all heads go tile by tile in one group (but for the plan's groups when predecoded).
  maps.order = kPredecoded ? maps.plan.order : grid_order(p, query_tiles(p, Cfg::kBlockM), p.batch * p.heads_q);
  maps.q_lookahead = multiprocessor_count() * Cfg::kBlocksPerSm;
  const int64_t blocks = attention_blocks(p, Cfg::kBlockM);
  const int64_t split_from = Cfg::kSplitTail ? split_tail_from(p, blocks, Cfg::kConsumerGroups, Cfg::kBlockN) : blocks;
  const int64_t grid = split_from + (blocks - split_from) * Cfg::kConsumerGroups;
  return launch_overlapping(p.overlap_launch, attention_wgmma_kernel<Cfg, OutT>, grid,
                            Cfg::kThreads, Cfg::kSmemBytes, stream, p, maps, static_cast<int>(split_from));
}

template <bool kFp8Scores, bool kPredecoded, int kGroupsAtD64 = 2, bool kFp8Output = false, int kGroupsAtD128 = 2>
struct WgmmaVariant {
  template <int kHeadDim, typename OutT>
  static cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
    constexpr int kGroups = kHeadDim == 64 ? kGroupsAtD64 : kGroupsAtD128;
    using Cfg = WgmmaConfig<kHeadDim, kFp8Scores, kPredecoded, kGroups, kFp8Output>;
    // `wgmma_fp8+fp8_pv` (128-row blocks) and `wgmma_fp8_m192+fp8_pv` take V^T from the pass where it pays;
    // `wgmma_fp8_m64+fp8_pv` runs where heads are short, and never does.
    if constexpr (kFp8Output && kGroups >= 2) {
      // Blocks of 192 rows are fewer than those of 128: the pass pays for them only where the workspace that
      // transposed_values_workspace_bytes plans for 128-row blocks exists.
      static_assert(Cfg::kBlockM >= kValuesByPassBlockM, "the rows transposed_values_workspace_bytes plans for");
      if (values_by_pass_pays(p, Cfg::kBlockM)) {
        return launch_wgmma_config<WgmmaConfig<kHeadDim, kFp8Scores, kPredecoded, kGroups, kFp8Output, true>, OutT>(
            p, stream);
      }
    }
    return launch_wgmma_config<Cfg, OutT>(p, stream);
  }
};

}  // namespace sdpa
