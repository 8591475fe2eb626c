// `decode`: attention for few query rows against many keys (token generation, speculative decoding, a short chunk
// against a cache), sm_80 and later. Decode is bound by the bytes of K and V, so the kernel reads every code once
// per kv head (the query heads of a kv head share a tile: decode_plan.h), spreads the keys over the whole GPU and
// keeps the tensor cores off the critical path.
//
// Block (kv head, row tile, key split): 4 warps (8 in sm_90's 16-row blocks, kDeepRings), 16 packed query rows each
// along the rows (kRowGroups) and the rest along the keys (kSplits key groups, each taking every kSplits-th tile of
// the block's key range through its own cp.async ring of kStages tiles). Per tile a warp does
//   S = Q K^T   m16n8k16 fp16 mma on codes converted in registers (exact products, fp32 sums) on every arch:
//               the e4m3 mma.sync exists only from sm_89, and its sums are not the fp32 ones the full tier promises
//   S *= the scale of each row's query head (q_scale k_scale softmax_scale log2 e), masked per row (the batch's key
//   count, the causal diagonal aligned top-left or bottom-right to that count)
//   softmax in registers, P in fp16; O += P V (code_tiles.cuh)
// then the key groups merge in shared memory (split_merge.cuh). With one key split the block writes out and lse;
// with more it writes partial rows (O / sum * v_scale, lse in log2 units) and decode_combine_kernel merges them
// (decode_merge.cuh). q is staged by decode_query.cuh. In `decode_wgmma` (sm_90) the 64-row blocks run as one
// warpgroup on wgmma instead (decode_warpgroup.cuh); narrower blocks stay as here.
//
// A call's fixed cost is its blocks' start: at 8x32x8x1x4096x128 (one wave of 256 blocks, H100) a block took 5-8 us
// from the end of the kernel ahead to its first tile, then 11-20 us of tiles (globaltimer trace, 2026-11-24). So on
// sm_90 the blocks, launched while the kernel ahead still runs, first ask L2 for their first tiles, and after the
// wait request all their small loads (q, the scales, the length) at once. Both together: 31.3 against 32.9 us there
// (53.6 / 55.3 at 16x32x8x1x8192x64, 99.6 / 101.0 at 1x32x8x1x131072x128). Splitting the keys over two to eight
// waves of blocks instead of one was slower on every decode row (29.0 against 31.8-67.4 us at 4096 keys), and so
// was merging the splits of a row tile in a thread-block cluster through distributed shared memory instead of the
// combine kernel (39.6 against 30.5 us; 463.8 against 326.0 at 16 queries).
#pragma once

#include <cfloat>
#include <type_traits>

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "../fp8_mma/code_tiles.cuh"
#include "decode_merge.cuh"
#include "decode_plan.h"
#include "decode_query.cuh"
#include "decode_rows.cuh"
#include "decode_warpgroup.cuh"

namespace sdpa {

// How a decode block multiplies: each warp by mma.sync on codes it converts itself (every arch), or, for 64-row
// blocks on sm_90, the four warps as one warpgroup by wgmma on fp16 tiles (decode_warpgroup.cuh).
struct DecodeByWarps {
  static constexpr bool kWgmma = false;
};
struct DecodeByWgmma {
  static constexpr bool kWgmma = true;
};

// kDeepRings: 16-row blocks with 16 slots instead of 12 (below), 128 KB of shared memory: sm_90 only (sm_89 gives a
// block at most 99 KB; sm_80 keeps 12 slots, not measured there).
template <int kHeadDim_, int kRowGroups_, class Mma = DecodeByWarps, bool kDeepRings_ = false>
struct DecodeConfig {
  static constexpr int kHeadDim = kHeadDim_, kRowGroups = kRowGroups_;
  static constexpr bool kDeepRings = kDeepRings_;
  static constexpr bool kWgmma = Mma::kWgmma;
  static_assert(!kWgmma || kRowGroups == 4, "a warpgroup multiplies 64 rows");
  static_assert(!kDeepRings || kRowGroups == 1, "deeper rings for the 16-row blocks");
  // The deep-ring blocks run 8 warps, one block per SM: with 4, each SM sub-partition had one warp to convert,
  // multiply and exponentiate every tile, and its chain of dependent steps held up the refills. H200, graph us,
  // three rounds each in one run, 4 warps (16 slots) / 8 warps (16 slots; 24 at D = 256): 8x32x8x1x4096x128 22.8 /
  // 22.7, 32x32x8x1x4096x128 69.3 / 68.0, 8x32x8x1x32768x128 129.3 / 127.4, 1x32x8x1x131072x128 69.1 / 68.4,
  // 16x32x8x1x8192x64 35.5 / 35.3, 8x32x8x4x32768x128 132.0 / 130.5, 8x16x8x1x8192x256 74.4 / 69.2. Two blocks
  // of 4 warps and 12 slots per SM (sm_80's blocks) lost 1-10% on those rows at D = 64 and 128 (D = 256 the same),
  // but for 256 one-query heads, where they won by 0.4-1.7% (66.6-66.8 against 67.0-67.9 us at 32x32x8x1x4096x128;
  // H200, 3 alternating rounds, 2026-11-29).
  static constexpr int kThreads = kDeepRings ? 256 : 128;
  // Where the row tiles outnumber the SMs (B x Hkv > 132 one-query heads on an H200) the deep-ring blocks form a
  // persistent grid, one block per SM taking row tiles in turn and asking L2 for its next one's first tiles while it
  // merges. The turns themselves neither cost nor save (same build, grid of every item against one per SM, 3
  // alternating rounds, H200: 24, 32, 33, 48 and 64 x 32 x 8 x 1 x 4096 x 128 within -0.6% and +1.3%), but with the
  // item loop ptxas gives these kernels more registers (200 against 184 at D = 128, 163 against 159 at D = 64), and
  // the one-query rows took 0.6-2.1% less time than the two-dimensional grid before it (graph us, 3 alternating
  // rounds: 8x32x8x1x4096x128 22.29-22.51 against 22.61-22.71, 32x32x8x1x4096x128 67.34-68.08 / 67.80-68.45,
  // 8x32x8x1x32768x128 125.53-127.05 / 126.55-127.45, 16x32x8x1x8192x64 34.55-34.96 / 35.30-35.68;
  // benchmarks/results/h200-2026-11-29-decode-grid.md). Not at D = 256, which the loop took from 250 to 255
  // registers and 68.8-69.3 to 70.5-71.6 us (8x16x8x1x8192x256).
  static constexpr bool kPersistent = kDeepRings && kHeadDim != kWideHeadDim;
  static constexpr int kSplits = kThreads / 32 / kRowGroups;  // key groups of a block
  static constexpr int kGroupThreads = 32 * kRowGroups;
  static constexpr int kBlockM = 16 * kRowGroups;
  // Tiles of 4 KB of codes: 32 keys at D = 128, where the 64 O accumulators leave room for 32 keys of S (as in
  // fp8_mma); 64 at D = 64 (32 there: 69.8 against 52.7 us at 16x32x8x1x8192x64, H100, 1cb1359); 16 at D = 256,
  // whose 128 O accumulators leave room for little else, and whose ring slots then hold what D = 128's do.
  static constexpr int kTileBytes = kDecodeTileBytes;
  static constexpr int kBlockN = kTileBytes / kHeadDim;
  // Slots of K + V codes per block. A key group's ring of S stages keeps S - 1 tiles in flight while its warps read
  // one, so fewer, deeper rings keep more bytes in flight: a pure read of these tiles (no math; 64 kv heads, one
  // wave) streamed 537 MB at 4.14 TB/s through 3-stage rings of 4 warps and at 4.41-4.46 TB/s through 6- or 12-stage
  // rings (H200, 2026-11-26). 16-row blocks (a warp per key group) on sm_90: 16 slots (128 KB, one block per SM),
  // two stages for each of the 8 warps (24 slots against 16 at 8 warps, H200: 23.3 / 22.7 us at 8x32x8x1x4096x128,
  // 70.0 / 68.0 at 32x32x8x1x4096x128, the others within 1%); 24 at D = 256, where the 8 warps' partial rows take
  // 140 KB; elsewhere 12. With 4 warps, graph us, 12 -> 16 slots, same run, in builds whose key loop ptxas scheduled
  // at 218 registers: H200 8x32x8x1x4096x128 22.1 -> 21.7, 8x32x8x1x32768x128 135.2 -> 129.6, 1x32x8x1x131072x128
  // 74.6 -> 70.8, 16x32x8x1x8192x64 37.6 -> 36.6; H100 16x32x8x1x8192x64 50.8 -> 47.7, its D = 128 rows within
  // 1.3% either way; 20 slots no better on either GPU. 32-row blocks: 12 slots, 6
  // stages per group with 2 key groups (96 KB, 2 blocks per SM). 64-row blocks: one key group of 8 stages (64 KB, 3
  // blocks per SM); 12 slots against 8 measured 344.4 against 300.9 us at 8x32x8x16x32768x128 (H100, 1cb1359):
  // those blocks want more warps to hide the latency of their mma chains. The warpgroup keeps all of its 3 slots in
  // flight, beside its fp16 tiles (K of two tiles, V of three): 64 KB, 3 blocks per SM. A fourth slot (72 KB, still
  // 3 blocks) changed nothing: H200, graph us, 3 alternating rounds, 3 / 4 slots, 8x32x8x16x32768x128 196.8-198.5 /
  // 196.3-197.0, 1x32x8x16x131072x128 102.6-103.4 / 102.9-104.0 (2026-11-28).
  static constexpr int kSlots = kWgmma                     ? 3
                                : kRowGroups == 4            ? 8
                                : !kDeepRings                ? 12
                                : kHeadDim == kWideHeadDim   ? 24
                                                             : 16;
  static constexpr int kStages = kSlots / kSplits;
  static constexpr int kGroupRingBytes = kStages * 2 * kTileBytes;
  static constexpr int kRoundKeys = kSplits * kBlockN;  // keys the block takes per round
  using Partials = SplitPartials<kHeadDim>;
  // The warpgroup's fp16 tiles first, on a 1024-byte boundary (wgmma's swizzle follows the address bits), then
  // the rings.
  static constexpr int kHalvesBytes = kWgmma ? 5 * kTileBytes * 2 : 0;
  static constexpr int kAlignment = kWgmma ? 1024 : 128;
  static constexpr int kUsedBytes = kHalvesBytes + kSplits * kGroupRingBytes;
  static constexpr int kSmemBytes = kUsedBytes + kAlignment - 128;  // the dynamic base is 128-byte aligned
  static_assert(kUsedBytes >= kThreads / 32 * Partials::kBytes, "the partial rows reuse the rings");
  // The Q codes are staged in key group 0's last ring slot, which the prologue leaves empty.
  static_assert(kBlockM * kHeadDim <= 2 * kTileBytes, "the staged Q fits one ring slot");
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;
};

// A warp's 16 packed rows: Q as fp16 fragments of its codes, O, the running max and sum (DecodeRows).
template <class Cfg>
struct DecodeWarp : DecodeRows<Cfg::kHeadDim> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using DecodeRows<kD>::o;
  E4m3HalfFragment q[kD / 32];

  __device__ void start(const AttentionParams& p, const DecodeBlock& blk, const uint8_t* stage,
                        const float* row_scale, int row_group, int lane) {
    this->set_rows(p, blk, row_scale, row_group, lane);
    uint32_t codes[kD / 32][4];
    this->load_code_q(codes, QueryCodes{stage, kD, Cfg::kBlockM}, /*flip_sign=*/false, lane);
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) q[ks].set(codes[ks]);
  }

  __device__ void consume(const uint8_t* k_tile, const uint8_t* v_tile, int key0, int lane) {
    using Layout = typename Cfg::Layout;
    float s[kN / 8][4];
    code_tile_scores<Layout, kD, kN>(s, k_tile, lane, [&](float (&s_tile)[4], int ks, uint32_t b0, uint32_t b1) {
      mma_16x8x32_e4m3_as_half(s_tile, q[ks].lo, q[ks].hi, b0, b1);
    });
    this->scale_and_mask(s, key0, lane);
    uint32_t probs[kN / 16][4];
    float correction[2];
    online_softmax_scores</*kGuessMax=*/false, Prescale::kNever>(s, this->softmax, 1.0f, probs, correction);
    rescale_rows(o, correction);
    code_tile_pv<Layout, kD, kN>(o, probs, v_tile, lane);
  }
};

// The rows of row tile `row_tile` (of the batch's kv heads' row tiles); the caller sets their keys and causal
// offset.
template <class Cfg>
__device__ __forceinline__ DecodeBlock locate_block(const AttentionParams& p, const DecodePlan& plan, int row_tile) {
  DecodeBlock blk;
  const int head = row_tile / plan.row_tiles;  // batch * heads_kv + kv head
  blk.batch = head / p.heads_kv;
  blk.head_kv = head % p.heads_kv;
  blk.row0 = row_tile % plan.row_tiles * Cfg::kBlockM;
  blk.rows = min(Cfg::kBlockM, decode_packed_rows(p) - blk.row0);
  return blk;
}

// Before the kernel ahead on the stream is done (programmatic launch), asks L2 for the tiles the key groups will
// load first (the block's first kStages - 1 rounds), taking the keys as the cache's capacity (the batch's lengths may
// come from that kernel): a hint, which the cp.async loads after the wait then find in L2.
template <class Cfg>
__device__ void prefetch_first_tiles(const typename Cfg::Rows& k_rows, const typename Cfg::Rows& v_rows, int tiles) {
  const int rows = min(tiles, (Cfg::kStages - 1) * Cfg::kSplits) * Cfg::kBlockN;
  for (int i = threadIdx.x; i < 2 * rows; i += Cfg::kThreads) {
    const int key = i % rows;
    if (key < k_rows.seqlen) {
      prefetch_l2(i < rows ? k_rows.head + key * k_rows.row_stride : v_rows.head + key * v_rows.row_stride);
    }
  }
}

// A work item of the decode kernel (decode_plan.h): key split `split` of row tile `row_tile`, from key key0 on.
struct DecodeItem {
  int split, row_tile, key0;
  __device__ DecodeItem(const DecodePlan& plan, int item)
      : split(item % plan.splits), row_tile(item / plan.splits), key0(split * plan.keys_per_split) {}
};

// The K and V rows of an item's block from its key0 on.
template <class Cfg>
struct ItemRows {
  typename Cfg::Rows k, v;
};
template <class Cfg>
__device__ __forceinline__ ItemRows<Cfg> item_rows(const AttentionParams& p, const DecodeBlock& blk, int key0) {
  auto rows = [&](const uint8_t* codes, int64_t batch_stride, int64_t head_stride, int64_t row_stride) {
    const int64_t head = blk.batch * batch_stride + blk.head_kv * head_stride + key0 * row_stride;
    return typename Cfg::Rows{codes + head, row_stride, 0, p.seqlen_k - key0};
  };
  return {rows(p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride),
          rows(p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride)};
}

// Asks L2 for the first tiles of work item `item` (prefetch_first_tiles), taking the keys as the cache's capacity.
template <class Cfg>
__device__ void prefetch_item(const AttentionParams& p, const DecodePlan& plan, int item) {
  const DecodeItem it(plan, item);
  const DecodeBlock blk = locate_block<Cfg>(p, plan, it.row_tile);
  const int capacity_tiles = (min(p.seqlen_k - it.key0, plan.keys_per_split) + Cfg::kBlockN - 1) / Cfg::kBlockN;
  const ItemRows<Cfg> rows = item_rows<Cfg>(p, blk, it.key0);
  prefetch_first_tiles<Cfg>(rows.k, rows.v, capacity_tiles);
}

// One work item; `next` is the block's next item (or plan.items: none), whose first tiles it asks L2 for once its
// own key loop is done.
template <class Cfg, typename OutT>
__device__ __forceinline__ void decode_item(const AttentionParams& p, const DecodePlan& plan, uint8_t* smem,
                                            int item, int next) {
  __shared__ float row_scale[Cfg::kBlockM];
  constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key_group = warp / Cfg::kRowGroups, row_group = warp % Cfg::kRowGroups;
  const int group_thread = threadIdx.x % Cfg::kGroupThreads, group_barrier = 1 + key_group;
  const DecodeItem it(plan, item);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Below sm_90 (never a persistent grid) the epilogue reads the item from here, after the loop's barriers: derived
  // again there (two divisions), it made the 32-row D = 64 blocks spill 4 bytes on sm_89 (nvcc 13.0). sm_90 keeps
  // the measured code.
  __shared__ int held_split, held_row_tile;
  if (threadIdx.x == 0) held_split = it.split, held_row_tile = it.row_tile;
#endif
  DecodeBlock blk = locate_block<Cfg>(p, plan, it.row_tile);
  // The block's keys [key0, key0 + keys_per_split), cut at what its rows see; key group g takes every kSplits-th tile.
  const int key0 = it.key0;
  ItemRows<Cfg> rows = item_rows<Cfg>(p, blk, key0);
  // Every small load the block needs is requested here, together: each one later would cost its own round trip.
  HeldQuery<Cfg> held;
  held.load(p, blk);
  const float key_scale = p.k_scale[blk.batch * p.heads_kv + blk.head_kv] * p.softmax_scale * kLog2e;
  const float v_scale_loaded = p.v_scale[blk.batch * p.heads_kv + blk.head_kv];
  blk.keys = p.seqlens_k == nullptr ? p.seqlen_k : min(max(p.seqlens_k[blk.batch], 0), p.seqlen_k);
  blk.causal_offset = p.seqlens_k != nullptr && p.causal_bottom_right ? blk.keys - p.seqlen_q : p.causal_offset;
  const int block_keys = max(0, min(blk.last_key_end(p), key0 + plan.keys_per_split) - key0);
  const int tiles = (block_keys + kN - 1) / kN;
  // Key group g takes tiles g, g + kSplits, ...: the block's groups read one stretch of K and one of V together
  // instead of a stretch each (8 streams an SM for the 16-row blocks). Graph us against contiguous shares, same
  // machine: H100 8x32x8x1x4096x128 29.1 / 29.7, 32x32x8x1x4096x128 95.1 / 97.1, 1x32x8x1x131072x128 95.5 / 96.9,
  // 16x32x8x1x8192x64 48.9 / 49.7, 8x16x8x1x8192x256 96.7 / 98.2, 8x32x8x1x32768x128 186.8 / 186.1. A pure read of
  // the same tiles: 2.74 / 2.66 TB/s at 67 MB, 3.04 / 3.00 at 268 MB. With contiguous shares the groups of a block
  // ended up to 3.5 us apart (8x32x8x1x4096x128, H100, globaltimer).
  const int first = key_group, last = tiles;
  // Rows past the batch's keys are zero-filled: a cache's unused rows may hold any bytes, NaN codes included.
  rows.k.seqlen = rows.v.seqlen = blk.keys - key0;
  uint8_t* rings = smem + Cfg::kHalvesBytes;
  uint8_t* ring = rings + key_group * Cfg::kGroupRingBytes;
  struct NoChunks {
    __device__ NoChunks(const typename Cfg::Rows&, const typename Cfg::Rows&) {}
  };
  std::conditional_t<Cfg::kWgmma, OwnedChunks<Cfg>, NoChunks> own(rows.k, rows.v);
  auto issue = [&](int tile) {
    if constexpr (Cfg::kWgmma) {
      issue_owned_tile(own, ring, tile, tiles, p);
    } else {
      issue_code_tile<Cfg, Cfg::kGroupThreads>(ring, rows.k, rows.v, tile, last, tile / Cfg::kSplits % Cfg::kStages,
                                              group_thread);
    }
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(first + t * Cfg::kSplits);

  // The Q codes are staged in key group 0's last ring slot, which the prologue leaves empty.
  uint8_t* stage = rings + (Cfg::kStages - 1) * 2 * Cfg::kTileBytes;
  stage_query<Cfg>(p, blk, held, key_scale, stage, row_scale);
  // The epilogue's v_scale through shared memory: held in a register through the loop, it made the warpgroup's
  // kernel spill. Stored here, after stage_query has waited for memory anyway, not right after its load.
  __shared__ float v_scale;
  if (threadIdx.x == 0) v_scale = v_scale_loaded;
  __syncthreads();
  std::conditional_t<Cfg::kWgmma, DecodeWarpgroup<Cfg>, DecodeWarp<Cfg>> w;
  if constexpr (Cfg::kWgmma) {
    w.start(p, blk, stage, row_scale, lane);
    __syncthreads();  // the stage is free for the first refill
    w.run(tiles, ring, reinterpret_cast<__half*>(smem), own, issue, key0, lane);
  } else {
    w.start(p, blk, stage, row_scale, row_group, lane);
    __syncthreads();  // the stage is free for key group 0's first refill
    run_key_group_rounds<Cfg, Cfg::kSplits>(tiles, first, last, ring, group_barrier, Cfg::kGroupThreads, issue,
                              [&](const uint8_t* slot, int tile) {
                                w.consume(slot, slot + Cfg::kTileBytes, key0 + tile * kN, lane);
                              });
  }
  if (next < plan.items) prefetch_item<Cfg>(p, plan, next);
  const float* partials = stage_partials<Cfg>(smem, w.softmax, w.o, warp, lane);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  const int split = held_split, row_tile = held_row_tile;
#else
  const DecodeItem it_again(plan, item);  // derived again: kept through the loop, the item took registers from it
  const int split = it_again.split, row_tile = it_again.row_tile;
#endif
  blk = locate_block<Cfg>(p, plan, row_tile);
  merge_partials<Cfg>(partials, blk.rows, [&](int row, int dim0, const float (&value)[8], float m, float sum) {
    const int head_q = blk.head_q(p, row), query = (blk.row0 + row) % p.seqlen_q;
    const bool seen = sum > 0.0f;  // the row max has P = 1, so a row that saw a key has sum >= 1
    const float out_scale = seen ? __fdividef(v_scale, sum) : 0.0f;
    const float lse_log2 = seen ? m + __log2f(sum) : -INFINITY;
    if (plan.splits == 1) {
      const HeadCoords c{blk.batch, head_q, blk.head_kv, 0};
      if (dim0 < p.out_dims) store_outputs(out_row<OutT>(p, c, query) + dim0, value, out_scale);
      if (dim0 == 0) lse_of(p, c, query) = lse_log2 * kLn2;
      return;
    }
    const int64_t flat = (static_cast<int64_t>(blk.batch) * p.heads_q + head_q) * p.seqlen_q + query;
    float* dst = partial_o<kD>(p.workspace, plan, split, flat) + dim0;
    *reinterpret_cast<float4*>(dst) =
        make_float4(value[0] * out_scale, value[1] * out_scale, value[2] * out_scale, value[3] * out_scale);
    *reinterpret_cast<float4*>(dst + 4) =
        make_float4(value[4] * out_scale, value[5] * out_scale, value[6] * out_scale, value[7] * out_scale);
    if (dim0 == 0) *partial_lse<kD>(p.workspace, plan, split, flat) = lse_log2;
  });
}

// The warpgroup's 64-row blocks are held to 168 registers, three blocks per SM (172 without). The deep-ring blocks,
// one per SM, say so: ptxas then gives them more registers (with 4 warps 186 instead of 168 at D = 128, and a key
// loop with fewer dependency stalls: harness, H100, 8x32x8x1x4096x128 30.1 -> 29.6 us, 16x32x8x1x8192x64 50.2 ->
// 49.8, 8x32x8x1x32768x128 184.5 -> 182.5; 184 with 8 warps). The other warps' blocks keep the default bound
// (spelled out as 1, it took their registers from 168 to 182-200; nvcc 13.0, sm_90a).
// Each block takes work items blockIdx.x, blockIdx.x + gridDim.x, ...: one unless the grid is persistent
// (DecodeConfig::kPersistent).
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kWgmma ? 3 : Cfg::kDeepRings ? 1 : 0)
    decode_attention_kernel(const AttentionParams p, const DecodePlan plan) {
  // 128-byte aligned: the code rings' XOR swizzle assumes 128-byte rows on 128-byte boundaries (aligned to 16 only,
  // ldmatrix met bank conflicts and the Sq = 1 rows ran 6-14% slower, H100).
  extern __shared__ __align__(128) uint8_t smem_base[];
  uint8_t* smem = smem_base;
  if constexpr (Cfg::kWgmma) smem += (Cfg::kAlignment - smem_address(smem_base) % Cfg::kAlignment) % Cfg::kAlignment;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // only programmatic launches start before the kernel ahead ends
  if (p.overlap_launch) prefetch_item<Cfg>(p, plan, blockIdx.x);
#endif
  allow_next_grid_launch();
  wait_for_previous_grids();  // q, the lengths, K and V may come from the kernel before (a cache append)
  if constexpr (Cfg::kPersistent) {
    for (int item = blockIdx.x; item < plan.items; item += gridDim.x) {
      if (item != blockIdx.x) __syncthreads();  // the last item's merge has read its partial rows from the rings
      decode_item<Cfg, OutT>(p, plan, smem, item, item + gridDim.x);
    }
  } else {
    decode_item<Cfg, OutT>(p, plan, smem, blockIdx.x, plan.items);
  }
}

}  // namespace sdpa
