// `decode`: attention for few query rows against many keys (token generation, speculative decoding, a short chunk
// against a cache), sm_80 and later. Decode is bound by the bytes of K and V, so the kernel reads every code once
// per kv head (the query heads of a kv head share a tile: decode_plan.h), spreads the keys over the whole GPU and
// keeps the tensor cores off the critical path.
//
// Block (kv head, row tile, key split): 4 warps, 16 packed query rows each along the rows (kRowGroups) and the
// rest along the keys (kSplits key groups, each a contiguous share of the block's key range, loaded through its own
// cp.async ring of kStages tiles, as in fp8_split). Per tile a warp does
//   S = Q K^T   m16n8k16 fp16 mma on codes converted in registers (exact products, fp32 sums) on every arch:
//               the e4m3 mma.sync exists only from sm_89, and its sums are not the fp32 ones the full tier promises
//   S *= the scale of each row's query head (q_scale k_scale softmax_scale log2 e), masked per row (the batch's key
//   count, the causal diagonal aligned top-left or bottom-right to that count)
//   softmax in registers, P in fp16; O += P V (code_tiles.cuh)
// then the key groups merge in shared memory (split_merge.cuh). With one key split the block writes out and lse;
// with more it writes partial rows (O / sum * v_scale, lse in log2 units) and decode_combine_kernel merges them
// (decode_merge.cuh). q is staged by decode_query.cuh.
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

#include "../common/attention_common.cuh"
#include "../common/fragment_softmax.cuh"
#include "../common/ptx.cuh"
#include "../common/tile_rows.cuh"
#include "../fp8_mma/code_tiles.cuh"
#include "decode_merge.cuh"
#include "decode_plan.h"
#include "decode_query.cuh"

namespace sdpa {

template <int kHeadDim_, int kRowGroups_>
struct DecodeConfig {
  static constexpr int kHeadDim = kHeadDim_, kRowGroups = kRowGroups_;
  static constexpr int kThreads = 128, kSplits = kThreads / 32 / kRowGroups;  // key groups of a block
  static constexpr int kGroupThreads = 32 * kRowGroups;
  static constexpr int kBlockM = 16 * kRowGroups;
  // 32-key tiles at D = 128, where the 64 O accumulators leave room for 32 keys of S (as in fp8_mma); 64 at D = 64.
  static constexpr int kBlockN = kHeadDim == 64 ? 64 : 32;
  static constexpr int kTileBytes = kBlockN * kHeadDim;
  // Slots of K + V codes per block: 12 (96 KB, 2 blocks per SM on an H100), 3 stages per group with 4 key groups
  // and 6 with 2; with 64 rows, one key group of 8 stages (64 KB, 3 blocks per SM). 12 slots against 8 for every
  // shape, graph us (H100, 2026-11-24, two runs; the combine kernel changed between them): 32x32x8x4096x128, one
  // split, 97.8 / 108.6; 8x32x8x32768x128 at 16 queries (64 rows) 344.4 / 300.9. The memory-bound rows want bytes
  // in flight, the 64-row blocks more warps to hide the latency of their mma chains.
  static constexpr int kSlots = kRowGroups == 4 ? 8 : 12;
  static constexpr int kStages = kSlots / kSplits;
  static constexpr int kGroupRingBytes = kStages * 2 * kTileBytes;
  static constexpr int kRoundKeys = kSplits * kBlockN;  // keys the block takes per round
  // The first of a block's `tiles` that key group `group` takes (its share ends at the next group's first).
  __device__ static int group_first_tile(int tiles, int group) { return group * tiles / kSplits; }
  using Partials = SplitPartials<kHeadDim>;
  static constexpr int kSmemBytes = kSplits * kGroupRingBytes;
  static_assert(kSmemBytes >= kThreads / 32 * Partials::kBytes, "the partial rows reuse the rings");
  // The Q codes are staged in key group 0's last ring slot, which the prologue leaves empty.
  static_assert(kBlockM * kHeadDim <= 2 * kTileBytes, "the staged Q fits one ring slot");
  using Rows = TileRows<kBlockN, kHeadDim>;
  using Layout = SwizzledCodeLayout<kHeadDim>;
};

// A warp's 16 packed rows: Q as fp16 fragments of its codes, O, the running max and sum, and per row the score
// scale and the keys it sees.
template <class Cfg>
struct DecodeWarp : FragmentRows<Cfg::kHeadDim / 8> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  using FragmentRows<kD / 8>::o;
  using FragmentRows<kD / 8>::row;
  using FragmentRows<kD / 8>::softmax;
  E4m3HalfFragment q[kD / 32];
  float scale[2];    // rows g and g + 8: score scale in log2 units
  int key_end[2];    // and one past the last key each sees
  int min_key_end;   // the smallest over the warp: tiles below it need no mask

  __device__ void start(const AttentionParams& p, const DecodeBlock& blk, const uint8_t* stage,
                        const float* row_scale, int row_group, int lane) {
    row[0] = row_group * 16 + lane / 4;
    row[1] = row[0] + 8;
    uint32_t codes[kD / 32][4];
    this->load_code_q(codes, stage, kD, Cfg::kBlockM, /*flip_sign=*/false, lane);
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks) q[ks].set(codes[ks]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool real = row[r] < blk.rows;
      scale[r] = real ? row_scale[row[r]] : 0.0f;
      key_end[r] = real ? blk.key_end(p, (blk.row0 + row[r]) % p.seqlen_q) : 0;
    }
    min_key_end = __reduce_min_sync(0xFFFFFFFFu, min(key_end[0], key_end[1]));
  }

  __device__ void consume(const uint8_t* k_tile, const uint8_t* v_tile, int key0, int lane) {
    using Layout = typename Cfg::Layout;
    float s[kN / 8][4];
    code_tile_scores<Layout, kD, kN>(s, k_tile, lane, [&](float (&s_tile)[4], int ks, uint32_t b0, uint32_t b1) {
      mma_16x8x32_e4m3_as_half(s_tile, q[ks].lo, q[ks].hi, b0, b1);
    });
    const bool masked = key0 + kN > min_key_end;
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + nt * 8 + 2 * (lane % 4) + i % 2;
        s[nt][i] = masked && key >= key_end[i / 2] ? -INFINITY : s[nt][i] * scale[i / 2];
      }
    }
    uint32_t probs[kN / 16][4];
    float correction[2];
    online_softmax_scores</*kGuessMax=*/false>(s, softmax, 1.0f, probs, correction);
    rescale_rows(o, correction);
    code_tile_pv<Layout, kD, kN>(o, probs, v_tile, lane);
  }
};

// Before the kernel ahead on the stream is done (programmatic launch), asks L2 for the first tiles each key group
// will load, taking the keys as the cache's capacity (the batch's lengths may come from that kernel): a hint, which
// the cp.async loads after the wait then find in L2.
template <class Cfg>
__device__ void prefetch_first_tiles(const typename Cfg::Rows& k_rows, const typename Cfg::Rows& v_rows,
                                     int tiles, int key_group, int group_thread) {
  constexpr int kRows = (Cfg::kStages - 1) * Cfg::kBlockN;
  const int first = Cfg::group_first_tile(tiles, key_group), last = Cfg::group_first_tile(tiles, key_group + 1);
  const int rows = min(kRows, (last - first) * Cfg::kBlockN);
  for (int i = group_thread; i < 2 * rows; i += Cfg::kGroupThreads) {
    const int key = first * Cfg::kBlockN + i % rows;
    if (key < k_rows.seqlen) {
      prefetch_l2(i < rows ? k_rows.head + key * k_rows.row_stride : v_rows.head + key * v_rows.row_stride);
    }
  }
}

template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::kThreads) decode_attention_kernel(const AttentionParams p,
                                                                         const DecodePlan plan) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float row_scale[Cfg::kBlockM];
  constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key_group = warp / Cfg::kRowGroups, row_group = warp % Cfg::kRowGroups;
  const int group_thread = threadIdx.x % Cfg::kGroupThreads, group_barrier = 1 + key_group;
  DecodeBlock blk;
  const int head = blockIdx.y / plan.row_tiles;  // batch * heads_kv + kv head
  blk.batch = head / p.heads_kv;
  blk.head_kv = head % p.heads_kv;
  blk.row0 = blockIdx.y % plan.row_tiles * Cfg::kBlockM;
  blk.rows = min(Cfg::kBlockM, decode_packed_rows(p) - blk.row0);
  // The block's keys [key0, key0 + keys_per_split), cut at what its rows see; key group g takes a contiguous share.
  const int key0 = blockIdx.x * plan.keys_per_split;
  const int64_t head_k = blk.batch * p.k_batch_stride + blk.head_kv * p.k_head_stride + key0 * p.k_row_stride;
  const int64_t head_v = blk.batch * p.v_batch_stride + blk.head_kv * p.v_head_stride + key0 * p.v_row_stride;
  typename Cfg::Rows k_rows{p.k + head_k, p.k_row_stride, 0, p.seqlen_k - key0};
  typename Cfg::Rows v_rows{p.v + head_v, p.v_row_stride, 0, p.seqlen_k - key0};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // only programmatic launches start before the kernel ahead ends
  if (p.overlap_launch) {
    const int capacity_tiles = (min(p.seqlen_k - key0, plan.keys_per_split) + kN - 1) / kN;
    prefetch_first_tiles<Cfg>(k_rows, v_rows, capacity_tiles, key_group, group_thread);
  }
#endif
  allow_next_grid_launch();
  wait_for_previous_grids();  // q, the lengths, K and V may come from the kernel before (a cache append)
  // Every small load the block needs is requested here, together: each one later would cost its own round trip.
  HeldQuery<Cfg> held;
  held.load(p, blk);
  const float key_scale = p.k_scale[blk.batch * p.heads_kv + blk.head_kv] * p.softmax_scale * kLog2e;
  const float v_scale = p.v_scale[blk.batch * p.heads_kv + blk.head_kv];
  blk.keys = p.seqlens_k == nullptr ? p.seqlen_k : min(max(p.seqlens_k[blk.batch], 0), p.seqlen_k);
  blk.causal_offset = p.seqlens_k != nullptr && p.causal_bottom_right ? blk.keys - p.seqlen_q : p.causal_offset;
  const int block_keys = max(0, min(blk.last_key_end(p), key0 + plan.keys_per_split) - key0);
  const int tiles = (block_keys + kN - 1) / kN;
  const int first = Cfg::group_first_tile(tiles, key_group), last = Cfg::group_first_tile(tiles, key_group + 1);
  // Rows past the batch's keys are zero-filled: a cache's unused rows may hold any bytes, NaN codes included.
  k_rows.seqlen = v_rows.seqlen = blk.keys - key0;
  uint8_t* ring = smem + key_group * Cfg::kGroupRingBytes;
  auto issue = [&](int tile) {
    issue_code_tile<Cfg, Cfg::kGroupThreads>(ring, k_rows, v_rows, tile, last, (tile - first) % Cfg::kStages,
                                            group_thread);
  };
#pragma unroll
  for (int t = 0; t < Cfg::kStages - 1; ++t) issue(first + t);

  // The Q codes are staged in key group 0's last ring slot, which the prologue leaves empty.
  uint8_t* stage = smem + (Cfg::kStages - 1) * 2 * Cfg::kTileBytes;
  stage_query<Cfg>(p, blk, held, key_scale, stage, row_scale);
  __syncthreads();
  DecodeWarp<Cfg> w;
  w.start(p, blk, stage, row_scale, row_group, lane);
  __syncthreads();  // the stage is free for key group 0's first refill

  run_key_group_rounds<Cfg>(tiles, first, last, ring, group_barrier, Cfg::kGroupThreads, issue,
                            [&](const uint8_t* slot, int tile) {
                              w.consume(slot, slot + Cfg::kTileBytes, key0 + tile * kN, lane);
                            });
  const float* partials = stage_partials<Cfg>(smem, w.softmax, w.o, warp, lane);
  merge_partials<Cfg>(partials, blk.rows, [&](int row, int dim0, const float (&value)[8], float m, float sum) {
    const int head_q = blk.head_q(p, row), query = (blk.row0 + row) % p.seqlen_q;
    const bool seen = sum > 0.0f;  // the row max has P = 1, so a row that saw a key has sum >= 1
    const float out_scale = seen ? __fdividef(v_scale, sum) : 0.0f;
    const float lse_log2 = seen ? m + __log2f(sum) : -INFINITY;
    if (plan.splits == 1) {
      const HeadCoords c{blk.batch, head_q, blk.head_kv, 0};
      store_outputs(out_row<OutT>(p, c, query) + dim0, value, out_scale);
      if (dim0 == 0) lse_of(p, c, query) = lse_log2 * kLn2;
      return;
    }
    const int64_t flat = (static_cast<int64_t>(blk.batch) * p.heads_q + head_q) * p.seqlen_q + query;
    float* dst = partial_o<kD>(p.workspace, plan, blockIdx.x, flat) + dim0;
    *reinterpret_cast<float4*>(dst) =
        make_float4(value[0] * out_scale, value[1] * out_scale, value[2] * out_scale, value[3] * out_scale);
    *reinterpret_cast<float4*>(dst + 4) =
        make_float4(value[4] * out_scale, value[5] * out_scale, value[6] * out_scale, value[7] * out_scale);
    if (dim0 == 0) *partial_lse<kD>(p.workspace, plan, blockIdx.x, flat) = lse_log2;
  });
}

}  // namespace sdpa
