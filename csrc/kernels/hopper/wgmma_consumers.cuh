// The consumer warpgroups of a Hopper block: Q (in registers or as a shared tile, quantized per 16 rows where q
// comes as values), then per key tile Q K^T, the softmax and P V by wgmma (WarpgroupAttention, consume_tiles).
#pragma once

#include <type_traits>

#include "../common/fragment_softmax.cuh"
#include "../common/tile_rows.cuh"
#include "wgmma_block.cuh"

namespace sdpa {

// decode_q_tile for a q of 16-bit values (p.q_row_groups): each consumer warp takes the amax of the 16 rows it
// attends (consume_tiles: rows 16 w of the job, or of its 64 rows in a split unit) and returns their scale
// (power_of_two_scale), as FragmentRows::quantize_q_chunks does for Q in registers; the warp whose index they are
// encodes them (the values held from their load to their encode) and decodes the codes into the tile.
template <class Cfg, typename T>
__device__ float quantize_q_tile(const WgmmaSmem<Cfg>& smem, const AttentionParams& p, const WgmmaJob& job,
                                 uint32_t sign, int rows) {
  constexpr int kChunksPerRow = Cfg::kHeadDim / 16, kLaneChunks = 16 * kChunksPerRow / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp % (rows / 16);
  const T* head = reinterpret_cast<const T*>(p.q) + job.c.batch * p.q_batch_stride + job.c.head_q * p.q_head_stride;
  auto row_of = [&](int i) { return 16 * group + (lane + 32 * i) / kChunksPerRow; };
  auto col_of = [&](int i) { return (lane + 32 * i) % kChunksPerRow * 16; };
  uint4 raw[kLaneChunks][2];  // the lane's chunks
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kLaneChunks; ++i) {
    const int row = job.row0 + row_of(i);
    load_q_values(head + row * p.q_row_stride, col_of(i), row < p.seqlen_q, p.q_dims, raw[i]);
    amax = fmaxf(amax, fmaxf(vector_amax<T>(raw[i][0]), vector_amax<T>(raw[i][1])));
  }
  const float scale = power_of_two_scale(group_max<32>(amax));
  if (group != warp) return scale;
  const E4m3PowerOfTwoDivisor divisor(scale);
#pragma unroll
  for (int i = 0; i < kLaneChunks; ++i) {
    store_decoded_16<HalfPanelLayout<Cfg::kBlockM>>(smem.q_halves(), row_of(i), col_of(i),
                                                    encode_q_values<T>(raw[i], divisor, sign));
  }
  return scale;
}

// The job's Q rows as an fp16 tile (HalfPanelLayout, signs flipped for a negative scale, rows past seqlen_q zero)
// for three consumer groups or D = 256 (kQInSmem), decoded by the consumers 16 codes at a time while the producers
// wait for the first tile; barrier 0 then holds the consumers until the tile is complete. (Decoded by the whole
// block before the producers started: 158.7 against 154 us at 4x16x2048x64, H200.) With kQuantizesQRows quantized
// from values instead (quantize_q_tile); returns the scale of the calling warp's rows then, else 1.
template <class Cfg>
__device__ __forceinline__ float decode_q_tile(const WgmmaSmem<Cfg>& smem, const AttentionParams& p,
                                               const WgmmaJob& job) {
  constexpr int kChunksPerRow = Cfg::kHeadDim / 16;
  const int rows = job.split ? 64 : Cfg::kBlockM;
  float rows_scale = 1.0f;
  if constexpr (Cfg::kQuantizesQRows) {
    const uint32_t sign = ScoreScale(p, job.c, 1.0f).flip_q ? 0x80808080u : 0u;
    rows_scale = p.q_type == QueryType::kBFloat16 ? quantize_q_tile<Cfg, __nv_bfloat16>(smem, p, job, sign, rows)
                                                  : quantize_q_tile<Cfg, __half>(smem, p, job, sign, rows);
  } else {
    const uint32_t sign = ScoreScale(p, job.c).flip_q ? 0x80808080u : 0u;
    const uint8_t* q = q_head(p, job.c);
    for (int chunk = threadIdx.x; chunk < rows * kChunksPerRow; chunk += Cfg::kConsumerThreads) {
      const int row = chunk / kChunksPerRow, col = chunk % kChunksPerRow * 16;
      uint4 codes = make_uint4(0, 0, 0, 0);
      if (job.row0 + row < p.seqlen_q) {
        codes = *reinterpret_cast<const uint4*>(q + (job.row0 + row) * p.q_row_stride + col);
        codes = make_uint4(codes.x ^ sign, codes.y ^ sign, codes.z ^ sign, codes.w ^ sign);
      }
      store_decoded_16<HalfPanelLayout<Cfg::kBlockM>>(smem.q_halves(), row, col, codes);
    }
  }
  fence_proxy_async();  // this thread's st.shared of the tile before wgmma reads it
  barrier_sync(0, Cfg::kConsumerThreads);
  return rows_scale;
}

// One warp of a consumer warpgroup: its 16 query rows of the group's 64 (the softmax state of FragmentRows).
template <class Cfg>
struct WarpgroupAttention : FragmentRows<Cfg::kHeadDim / 8, typename Cfg::Softmax, Cfg::kQuantizesQRows> {
  static constexpr int kD = Cfg::kHeadDim, kN = Cfg::kBlockN;
  static constexpr int kQSteps = Cfg::kFp8Scores ? kD / 32 : kD / 16;  // k32 steps of codes or k16 of fp16
  static constexpr int kQWords = Cfg::kQCodesForHalves ? 2 : 4;
  using FragmentRows<kD / 8, typename Cfg::Softmax, Cfg::kQuantizesQRows>::o;
  // The warp's 16 rows of Q: A fragments of E4M3 codes (wgmma_fp8) or fp16 (wgmma), or with kQCodesForHalves the
  // codes of the fp16 fragments (load_half_q_codes), converted into q_halves before each Q K^T.
  struct NoFragments {};
  std::conditional_t<Cfg::kQInSmem, NoFragments, uint32_t[kQSteps][kQWords]> q;
  std::conditional_t<Cfg::kQCodesForHalves, uint32_t[kQSteps][4], NoFragments> q_halves;
  // Shared-memory descriptors of slot 0's K and V tiles, low words (descriptor_high: kKHigh, kHalfHigh). Slot s
  // lies s * kSlotBytes further, s * kSlotUnits in the descriptor's 16-byte start field, which cannot carry
  // (shared addresses stay below 2^18): one multiply-add per tile instead of deriving each descriptor from
  // tile % kStages (a chain of ~10 dependent uniform instructions before each batch of wgmma).
  uint32_t k_desc0, v_desc0;
  // kQInSmem: the descriptor of the warpgroup's 64 rows of the Q tile (low word).
  uint32_t q_desc;
  static constexpr uint32_t kSlotUnits = Cfg::kSlotBytes / 16;
  static constexpr uint64_t kHalfHigh = descriptor_high(1024, 128);
  static constexpr uint64_t kKHigh = Cfg::kFp8Scores ? descriptor_high(8 * kD, kD) : kHalfHigh;
  static constexpr uint64_t kVHigh = Cfg::kFp8Output ? descriptor_high(8 * kN, kN) : kHalfHigh;

  // Q of the warp's rows, from global memory. In registers it spares the tensor cores shared-memory reads at every
  // tile, and the producers a load or decode at the start of every block. (wgmma_fp8 with Q codes in shared
  // memory, loaded by TMA and sign-flipped by the producers, against registers, one run on an H200: 183.6 / 227.0
  // / 779.4 against 179.4 / 213.3 / 730.3 us at 4x16x2048x64 / 4x16x2048x128 / 1x16x8192x128.)
  __device__ void set_q(const AttentionParams& p, const HeadCoords& c, bool flip_q, int lane) {
    if constexpr (Cfg::kQInSmem) {
      return;  // decoded into shared memory by the consumers (decode_q_tile)
    } else if constexpr (Cfg::kFp8Scores) {
      this->load_code_q(q, CallQuery{p, c}, flip_q, lane);
    } else if constexpr (Cfg::kQCodesForHalves) {
      this->load_half_q_codes(q, CallQuery{p, c}, flip_q, lane);
    } else {
      this->load_half_q(q, CallQuery{p, c}, flip_q, lane);
    }
  }

  // K K-major. Code tiles (wgmma_fp8): 8-row groups 8 * kD bytes apart. fp16 panels (wgmma): 8-row groups 1024
  // bytes apart. V N-major: 128-byte rows of 64 dims, panels kPanelBytes apart, 8-key groups 1024 bytes apart.
  // kQInSmem: the Q tile as the A operand, K-major like fp16 K; the warpgroup's rows start at q_row0.
  __device__ void set_descriptors(const WgmmaSmem<Cfg>& smem, int q_row0) {
    if constexpr (Cfg::kQInSmem) {
      q_desc = descriptor_low(smem.q_halves() + HalfPanelLayout<Cfg::kBlockM>::offset(q_row0, 0), 16);
    }
    k_desc0 = descriptor_low(Cfg::kFp8Scores ? static_cast<const void*>(smem.k_codes(0)) : smem.k_halves(0), 16);
    v_desc0 = Cfg::kFp8Output ? descriptor_low(smem.v_transposed(0), 16)
                              : descriptor_low(smem.v_halves(0), Cfg::kPanelBytes);
  }

  // With kQCodesForHalves, the fp16 fragments of Q for the next issue_scores; before its wgmma_fence, since
  // conversions between the wgmma made ptxas put a warpgroup.arrive before each.
  __device__ void convert_q() {
    if constexpr (Cfg::kQCodesForHalves) {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) half_q_fragment(q[ks], q_halves[ks]);
    }
  }

  // Starts S = Q K^T for the slot's tile (one commit group). Code tiles: a k32 step is 32 bytes = 2 descriptor
  // units. fp16 panels (K, and Q with kQInSmem): a k16 step is 32 bytes within a panel's 128-byte rows, then the
  // next panel.
  __device__ void issue_scores(float (&s)[kN / 8][4], int slot) {
    const uint32_t k_desc = k_desc0 + slot * kSlotUnits;
    // Q's descriptors derived anew for each tile: hoisted, they took 8 registers across the loop (and spilled).
    const uint32_t q_tile = tied_to(q_desc, slot);
    if constexpr (Cfg::kFp8Scores) {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) wgmma_e4m3_rs(s, q[ks], kKHigh | (k_desc + 2 * ks), ks > 0);
    } else {
#pragma unroll
      for (int ks = 0; ks < kQSteps; ++ks) {
        const int panel = ks / 4, step = 2 * (ks % 4);
        const uint64_t b = kKHigh | (k_desc + panel * (Cfg::kPanelBytes / 16) + step);
        if constexpr (Cfg::kQInSmem) {
          wgmma_f16_ss(s, kHalfHigh | (q_tile + panel * (Cfg::kBlockM * 128 / 16) + step), b, ks > 0);
        } else if constexpr (Cfg::kQCodesForHalves) {
          wgmma_f16_rs<false>(s, q_halves[ks], b, ks > 0);
        } else {
          wgmma_f16_rs<false>(s, q[ks], b, ks > 0);
        }
      }
    }
    wgmma_commit();
  }

  // S = Q K^T of the warp's 16 rows again, for the rare tile whose guessed row max failed after the exponentials
  // had replaced S (kLatePack): by mma.sync (m16n8k16, fp32 sums) from the slot's fp16 K tile and Q's A fragments,
  // the same products as the wgmma summed in another order. Not by wgmma: ptxas serializes every wgmma of a
  // kernel after one issued under a condition.
  // With kQInSmem the Q fragments come from the Q tile by ldmatrix (matrix m: rows 8 (m % 2), dims 8 (m / 2)).
  __device__ void recompute_scores(float (&s)[kN / 8][4], const WgmmaSmem<Cfg>& smem, int slot, int lane) const {
    static_assert(Cfg::kLatePack && !Cfg::kQCodesForHalves, "fp16 K tiles and Q fragments");
    if constexpr (Cfg::kQInSmem) {
      const int mat = lane / 8, row = threadIdx.x / 32 * 16 + mat % 2 * 8 + lane % 8;  // not a split unit
      half_tile_scores<HalfPanelLayout<kN>, kD / 16>(s, [&](int ks, uint32_t (&a)[4]) {
        ldmatrix_x4(a, smem.q_halves() + HalfPanelLayout<Cfg::kBlockM>::offset(row, ks * 16 + mat / 2 * 8));
      }, smem.k_halves(slot), lane);
    } else {
      half_tile_scores<HalfPanelLayout<kN>>(s, q, smem.k_halves(slot), lane);
    }
  }

  // Starts O += P V for the slot's tile (one commit group). fp16 V N-major: a k16 step is 16 keys = 2048 bytes,
  // 128 descriptor units. Transposed V codes (kFp8Output): a k32 step is 32 bytes of its 128-byte rows.
  __device__ void issue_output(const typename Cfg::Probabilities& a, int slot) {
    const uint32_t v_desc = v_desc0 + slot * kSlotUnits;
    if constexpr (Cfg::kFp8Output) {
#pragma unroll
      for (int kt = 0; kt < kN / 32; ++kt) wgmma_e4m3_rs(o, a[kt], kVHigh | (v_desc + 2 * kt), true);
    } else {
#pragma unroll
      for (int kt = 0; kt < kN / 16; ++kt) wgmma_f16_rs<true>(o, a[kt], kHalfHigh | (v_desc + 128 * kt), true);
    }
    wgmma_commit();
  }

  // A split unit's end: groups 1 and 2 leave their O, row max and lane row sums in `partials` (per warp and
  // float4, lane-major: conflict-free) and return false; group 0 merges them into its own, M = max m_g,
  // O = sum O_g 2^(f_g - F), sum = sum sum_g 2^(f_g - F) with f and F the exp2 offsets of m_g and M (a group that
  // saw nothing of a row has m_g = -inf and weight 0), and returns true to store the rows. The max is the same on
  // the lanes of a quad, so the lane sums merge before finish_rows reduces them.
  __device__ bool merge_split_groups(float* partials, int group, int lane) {
    constexpr int kFloats = Cfg::kPartialFloats, kOFloats = kD / 2;
    static_assert(kFloats == kOFloats + 4 && kFloats % 4 == 0, "O, then max and sum of both rows");
    const int warp_in_group = threadIdx.x / 32 % 4;
    auto partial = [&](int g, int i) {  // float4 i of group g's lane
      return reinterpret_cast<float4*>(partials) + (((g - 1) * 4 + warp_in_group) * (kFloats / 4) + i) * 32 + lane;
    };
    if (group > 0) {
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) *partial(group, dt) = make_float4(o[dt][0], o[dt][1], o[dt][2], o[dt][3]);
      *partial(group, kOFloats / 4) =
          make_float4(this->softmax[0].max, this->softmax[1].max, this->softmax[0].sum, this->softmax[1].sum);
    }
    barrier_sync(0, Cfg::kConsumerThreads);  // the producers are done: id 0 is free
    if (group > 0) return false;
    // One group's partials at a time: unrolled, at D = 128 the loads of both were hoisted and spilled 20 bytes.
#pragma unroll 1
    for (int g = 1; g < Cfg::kConsumerGroups; ++g) {
      const float4 state = *partial(g, kOFloats / 4);
      const float max[2] = {state.x, state.y}, sum[2] = {state.z, state.w};
      float mine[2], theirs[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float merged = fmaxf(this->softmax[r].max, max[r]);
        const float reference = Cfg::Softmax::offset_of(merged);
        mine[r] = merged == -INFINITY ? 1.0f : exp2f(this->softmax[r].offset() - reference);
        theirs[r] = max[r] == -INFINITY ? 0.0f : exp2f(Cfg::Softmax::offset_of(max[r]) - reference);
        this->softmax[r].max = merged;
        this->softmax[r].sum = this->softmax[r].sum * mine[r] + sum[r] * theirs[r];
      }
#pragma unroll
      for (int dt = 0; dt < kD / 8; ++dt) {
        const float4 other = *partial(g, dt);
        o[dt][0] = o[dt][0] * mine[0] + other.x * theirs[0];
        o[dt][1] = o[dt][1] * mine[0] + other.y * theirs[0];
        o[dt][2] = o[dt][2] * mine[1] + other.z * theirs[1];
        o[dt][3] = o[dt][3] * mine[1] + other.w * theirs[1];
      }
    }
    return true;
  }
};

// A split unit's loop (kSplitTail): group g takes tiles g, g + kConsumerGroups, ..., all in slot g, and waits for
// each P V before it asks for its next tile: with one slot per group the producers cannot load that tile before the
// P V is done. The groups overlap one another instead. With kCopiesOnly (V^T by the pass) the group waits on its
// slot's copies and frees the slot after P V only.
template <class Cfg>
__device__ __forceinline__ void consume_split_tiles(WarpgroupAttention<Cfg>& w, const WgmmaSmem<Cfg>& smem,
                                                    const AttentionParams& p, int group, int tiles, int lane) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN, kConsumers = Cfg::kGroupThreads;
  static_assert(Cfg::kStages == Cfg::kConsumerGroups, "tile t in slot t % kStages is group t's slot");
  const int slot = group;
  for (int tile = group; tile < tiles; tile += Cfg::kConsumerGroups) {
    float s[kN / 8][4];
    typename Cfg::Probabilities a;
    wait_for_tile<Cfg>(smem, tile, slot, group);
    wgmma_fence();
    w.issue_scores(s, slot);
    wgmma_wait<0>();
    pin_registers(s);
    const bool refilled = Bars::refilled(tile, tiles);
    if (refilled && Cfg::kConsumersFreeCodes) barrier_arrive(Bars::codes_free(slot), Bars::slot_users(kConsumers));
    w.template scores_to_probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, tile * kN, p, lane, a);
    wgmma_fence();
    w.issue_output(a, slot);
    wgmma_wait<0>();
    pin_registers(a);
    pin_registers(w.o);
    if (refilled) barrier_arrive(Bars::halves_free(slot), Bars::slot_users(kConsumers));
  }
}

// The two consumer groups take turns issuing their wgmma batches (TURN barriers), so that one group's softmax runs
// while the other's matrix products occupy the tensor cores. A group issues tile t's Q K^T together with tile
// t - 1's P V, waits for Q K^T only and runs the softmax of tile t (guessing that the row max stays,
// online_softmax_scores) while that P V still runs, writing P into separate A fragments (`next`); then it waits
// for the P V, rescales O and takes over the new fragments (replace_fragments). With kLatePack the softmax leaves
// P in S as fp32 and packs it into the fragments after the wait instead. Nothing stays in flight across
// loop passes: ptxas serialized every wgmma when a partial wait did. Batches: S(0); S(t) + PV(t - 1) for
// t >= 1; PV(last).
// H200, graph us, one run, with / without P V in flight during the softmax: `wgmma` 174.6 / 177.2 at
// 4x16x2048x64, 253.1 / 264.0 at 4x16x2048x128, 912.5 / 946.9 at 1x16x8192x128 (causal 104.7 / 106.3,
// 152.7 / 155.2, 469.3 / 485.2); `wgmma_fp8` 162.1 / 164.3, 193.8 / 195.2, 694.5 / 696.8. Earlier, before the
// guessed max, a schedule with P V in flight wrote P into the fragments that P V read, which forced the exact row
// max first; turns at D = 128: without / with, 277.7 / 270.8 and 985.2 / 944.7 us.
template <class Cfg, typename OutT>
__device__ __forceinline__ void consume_tiles(const WgmmaSmem<Cfg>& smem, const AttentionParams& p,
                                              const WgmmaJob& job, int tiles) {
  using Bars = WgmmaBarriers<Cfg>;
  constexpr int kN = Cfg::kBlockN;
  // The group through a shuffle, which tells ptxas that it is the same across the warp: values derived from it
  // (group_tiles) may then sit in uniform registers, and the three-group consumers fit their 160 registers (with
  // warp / 4 they spilled 20 bytes).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = __shfl_sync(0xFFFFFFFFu, warp / 4, 0);
  const HeadCoords& c = job.c;
  const bool split = Cfg::kSplitTail && job.split;
  const int q_row0 = split ? 0 : 64 * group;  // the group's rows in the job's
  // kQInSmem with kQuantizesQRows: the job's Q tile, and the scale of the warp's rows in it (without, the kernel
  // decodes the tile before it calls this).
  float q_rows_scale = 1.0f;
  if constexpr (Cfg::kQInSmem && Cfg::kQuantizesQRows) q_rows_scale = decode_q_tile<Cfg>(smem, p, job);
  WarpgroupAttention<Cfg> w;
  w.set_q(p, c, w.start(p, c, job.row0 + q_row0, warp % 4, lane), lane);
  if constexpr (Cfg::kQInSmem && Cfg::kQuantizesQRows) w.score_scale = ScoreScale(p, c, q_rows_scale).log2_units;
  w.set_descriptors(smem, q_row0);
  if constexpr (Cfg::kSplitTail) {
    if (split) {
      consume_split_tiles(w, smem, p, group, tiles, lane);
      if (w.merge_split_groups(smem.partials(), group, lane)) w.template store_output<OutT>(p, c, lane);
      return;
    }
  }
  // The tiles this group multiplies: the block's first group_tiles; the producers still load all `tiles`.
  const int group_tiles = Cfg::kGroupTiles ? key_tiles_of_rows(p, job.row0 + q_row0, 64, kN) : tiles;
  // Lets the producers overwrite the codes of the slot's tile once its Q K^T is done.
  auto free_codes = [&](int tile, int slot) {
    if (Cfg::kConsumersFreeCodes && Bars::refilled(tile, tiles)) {
      barrier_arrive(Bars::codes_free(slot), Bars::slot_users(Cfg::kConsumerThreads));
    }
  };
  // Lets the producers refill the slot of a tile once its P V is done (they wait only for the slots they refill).
  auto free_halves = [&](int tile, int slot) {
    if (Bars::refilled(tile, tiles)) barrier_arrive(Bars::halves_free(slot), Bars::slot_users(Cfg::kConsumerThreads));
  };
  // Predecoded, waits for the first tile's V (load_half_tiles), before any P V; with kSeparateValues for each
  // tile's V before its P V.
  auto wait_for_values = [&](int tile, int slot) {
    if constexpr (Cfg::kSeparateValues) {
      mbarrier_wait(smem.values_loaded(slot), tile / Cfg::kStages % 2);
    } else if constexpr (Cfg::kPredecoded) {
      if (tile == 0) mbarrier_wait(smem.values_loaded(0), 0);
    }
  };
  auto take_turn = [&] {
    if constexpr (Cfg::kTurns) barrier_sync(Bars::turn(group), Bars::kGroupPair);
  };
  auto pass_turn = [&] {
    if constexpr (Cfg::kTurns) barrier_arrive(Bars::turn(1 - group), Bars::kGroupPair);
  };
  // Lets the producers past tile `tile`, which the group leaves out (from group_tiles on): its FULL taken, its
  // codes and its fp16 slot freed.
  auto skip_tile = [&](int tile) {
    const int slot = tile % Cfg::kStages;
    wait_for_tile<Cfg>(smem, tile, slot, group);
    free_codes(tile, slot);
    free_halves(tile, slot);
  };
  if constexpr (Cfg::kGroupTiles) {
    if (group_tiles == 0) {  // rows past seqlen_q only: no wgmma at all
      for (int tile = 0; tile < tiles; ++tile) skip_tile(tile);
      return;
    }
  }
  if (group == 1) pass_turn();  // group 0 issues first

  float s[kN / 8][4];      // S of the current tile
  typename Cfg::Probabilities a;  // P of the previous tile, the A fragments of its P V
  // Each wgmma issue unconditional in its own straight code: ptxas serialized every wgmma of the kernel after one
  // issued under a condition (nvcc 13.0).
  w.convert_q();
  wait_for_tile<Cfg>(smem, 0, 0, group);
  take_turn();
  wgmma_fence();
  w.issue_scores(s, 0);
  pass_turn();
  wgmma_wait<0>();
  pin_registers(s);
  if constexpr (Cfg::kQCodesForHalves) pin_registers(w.q_halves);
  free_codes(0, 0);
  w.template scores_to_probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, 0, p, lane, a);
  wait_for_values(0, 0);  // landed during the softmax
  int slot = 0;  // tile % kStages, counted rather than divided
  for (int tile = 1; tile < group_tiles; ++tile) {
    const int prev = slot;
    slot = slot + 1 == Cfg::kStages ? 0 : slot + 1;
    w.convert_q();
    wait_for_tile<Cfg>(smem, tile, slot, group);
    if (tile > 1) wait_for_values(tile - 1, prev);
    take_turn();
    wgmma_fence();
    w.issue_scores(s, slot);
    w.issue_output(a, prev);
    pass_turn();
    wgmma_wait<1>();  // S of this tile; P V of the last one still runs during the softmax
    pin_registers(s);
    if constexpr (Cfg::kQCodesForHalves) pin_registers(w.q_halves);  // read by Q K^T until here
    free_codes(tile, slot);
    float correction[2];
    // Waits for the last tile's P V, frees its slot and rescales O for this tile.
    auto finish_output = [&] {
      wgmma_wait<0>();
      pin_registers(a);  // read by that P V until here: no other value may take their registers before
      pin_registers(w.o);
      free_halves(tile - 1, prev);
      rescale_rows(w.o, correction);
    };
    if constexpr (Cfg::kLatePack) {
      w.exponentials(s, tile * kN, p, correction,
                     [&](float (&raw)[kN / 8][4]) { w.recompute_scores(raw, smem, slot, lane); });
      finish_output();
      pack_probabilities(s, a);
    } else {
      typename Cfg::Probabilities next;
      w.template probabilities</*kGuessMax=*/true, Cfg::kPrescale>(s, tile * kN, p, lane, next, correction);
      finish_output();
      replace_fragments(a, next);
    }
  }
  if (group_tiles > 1) wait_for_values(group_tiles - 1, slot);
  take_turn();
  wgmma_fence();
  w.issue_output(a, slot);
  if (group == 0) pass_turn();  // group 1 takes its last turn after this; nobody waits for one more
  wgmma_wait<0>();
  pin_registers(w.o);
  if constexpr (Cfg::kGroupTiles) free_halves(group_tiles - 1, slot);  // otherwise the block's last tile
  w.template store_output<OutT>(p, c, lane);
  if constexpr (Cfg::kGroupTiles) {
    for (int tile = group_tiles; tile < tiles; ++tile) skip_tile(tile);
  }
}

}  // namespace sdpa
